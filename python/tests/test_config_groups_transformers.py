"""`qobs quantize --config` with several groups, loaded by transformers.

A tiny Llama (built from a config, no download) is quantized by the qobs CLI with a
recipe of two groups (attention W8 per channel, MLP W4 group 128) and an ignore list; the
result must load with transformers' compressed-tensors integration, give every module the
group's scheme, and stay close to the unquantized model. Skipped without transformers /
compressed-tensors or without a built CLI ($QOBS_CLI, else build/cli/qobs).
"""

import json
import subprocess

import pytest

RECIPE = r"""
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      ignore: [lm_head, 're:.*layers\.1\.mlp\.gate_proj']
      config_groups:
        attention:
          targets: ['re:.*self_attn\.(q|k|v|o)_proj$']
          weights: {num_bits: 8, type: int, symmetric: true, strategy: channel}
        mlp:
          targets: ['re:.*mlp\..*']
          weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 128}
"""


def test_multi_group_config_loads_with_transformers(torch, qobs_cli, tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("compressed_tensors")
    from transformers.utils.quantization_config import CompressedTensorsConfig

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    src, out = tmp_path / "in", tmp_path / "out"
    model.save_pretrained(src, safe_serialization=True)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE)
    subprocess.run([str(qobs_cli), "quantize", str(src), "-o", str(out), "--config", str(recipe), "--quiet"],
                   check=True)

    qmodel = transformers.LlamaForCausalLM.from_pretrained(
        out, quantization_config=CompressedTensorsConfig(run_compressed=False)).eval()
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    assert set(qc["config_groups"]) == {"attention", "mlp"}
    assert qc["ignore"] == ["lm_head", r"re:.*layers\.1\.mlp\.gate_proj"]
    for name, module in qmodel.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")):
            assert scheme is not None and scheme.weights.num_bits == 8, name
        elif name.endswith(("up_proj", "down_proj")) or name == "model.layers.0.mlp.gate_proj":
            assert scheme is not None and scheme.weights.num_bits == 4 and scheme.weights.group_size == 128, name
        elif name in ("lm_head", "model.layers.1.mlp.gate_proj"):
            assert scheme is None, name
            assert torch.equal(module.weight, model.get_submodule(name).weight), name

    ids = torch.randint(0, cfg.vocab_size, (1, 16))
    with torch.no_grad():
        ref = model(ids).logits.flatten()
        got = qmodel(ids).logits.flatten().to(ref.dtype)
    assert torch.nn.functional.cosine_similarity(ref, got, dim=0) > 0.95
