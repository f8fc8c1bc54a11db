"""`qobs quantize` with the least-squares observers (lsq_mse, and imatrix_lsq with
--importance collected by qobs.collect_importance) loads in transformers exactly like
memoryless_minmax output: the same checkpoint tensors (names, dtypes, shapes), the same
quantization_config but for the observer name, the same module parameters after loading,
and every decompressed weight bit-identical to `qobs dequantize` of that checkpoint.

A tiny Llama is built from a config (no download). Skipped without transformers /
compressed-tensors / safetensors or without a built CLI ($QOBS_CLI, else build/cli/qobs).
"""

import json
import subprocess

import pytest

import qobs

def _bits(torch, t):
    return t.contiguous().view(-1).view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _without_observer(config):
    q = json.loads(json.dumps(config["quantization_config"]))
    for g in q["config_groups"].values():
        g["weights"].pop("observer")
    return q


@pytest.mark.parametrize("scheme", ["W4A16", "NVFP4A16"])
def test_lsq_outputs_load_like_minmax(torch, qobs_cli, tmp_path, scheme):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from transformers.utils.quantization_config import CompressedTensorsConfig

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    src = tmp_path / "in"
    model.save_pretrained(src, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    imp = tmp_path / "importance.safetensors"
    qobs.collect_importance(model, [{"input_ids": torch.randint(0, 256, (2, 16), generator=g)} for _ in range(3)], imp)

    runs = {"memoryless_minmax": [], "lsq_mse": [], "imatrix_lsq": ["--importance", str(imp)]}
    files, configs, loaded = {}, {}, {}
    for observer, extra in runs.items():
        out = tmp_path / observer
        subprocess.run([str(qobs_cli), "quantize", str(src), "-o", str(out), "--scheme", scheme, "--observer", observer,
                        "--quiet", *extra], check=True)
        files[observer] = safetensors_torch.load_file(out / "model.safetensors")
        configs[observer] = json.loads((out / "config.json").read_text())
        qmodel = transformers.LlamaForCausalLM.from_pretrained(
            out, quantization_config=CompressedTensorsConfig(run_compressed=False)).eval()
        sd = qmodel.state_dict()
        loaded[observer] = {k: (v.dtype, tuple(v.shape)) for k, v in sd.items()}
        # the decompressed weights are qobs's own dequantization, bit for bit
        qweights = [k[: -len(".weight_scale")] for k in files[observer] if k.endswith(".weight_scale")]
        dtype = str(sd[qweights[0] + ".weight"].dtype).replace("torch.", "")
        dq = tmp_path / f"{observer}-dq.safetensors"
        subprocess.run([str(qobs_cli), "dequantize", str(out), "-o", str(dq), "--dtype", dtype], check=True,
                       capture_output=True)
        for name, t in safetensors_torch.load_file(dq).items():
            assert torch.equal(_bits(torch, sd[name].detach().to(t.dtype)), _bits(torch, t)), (observer, name)
        assert configs[observer]["quantization_config"]["config_groups"]["group_0"]["weights"]["observer"] == observer

    ref = files["memoryless_minmax"]
    for observer in ("lsq_mse", "imatrix_lsq"):
        got = files[observer]
        assert {k: (v.dtype, v.shape) for k, v in got.items()} == {k: (v.dtype, v.shape) for k, v in ref.items()}
        assert _without_observer(configs[observer]) == _without_observer(configs["memoryless_minmax"])
        assert loaded[observer] == loaded["memoryless_minmax"]
        # the observers did choose other scales than min-max
        scales = [k for k in ref if k.endswith(".weight_scale")]
        assert any(not torch.equal(got[k], ref[k]) for k in scales), observer
