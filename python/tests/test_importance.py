"""qobs.collect_importance / merge_importance and `qobs quantize --importance` (docs/RULES.md
R6.12.4). The collected statistics must be bit for bit those the imatrix observers
accumulate through their own hooks (qobs's, and llm-compressor's built-in imatrix_mse
when installed). Tests that run a model need torch; the CLI ones need the built qobs
executable ($QOBS_CLI, else build/cli/qobs) and are skipped without it.
"""

import json
import struct
import subprocess

import numpy as np
import pytest

import qobs


def _block(torch, dtype):
    """model.layers.0.mlp.{gate,up,down}_proj as a Llama MLP, plus a Linear that no
    input reaches."""
    torch.manual_seed(0)

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = torch.nn.Linear(128, 256, bias=False)
            self.up_proj = torch.nn.Linear(128, 256, bias=False)
            self.down_proj = torch.nn.Linear(256, 128, bias=False)
            self.unused = torch.nn.Linear(8, 8, bias=False)

        def forward(self, x, gain=None):
            h = torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x)
            if gain is not None:
                h = h * gain
            return self.down_proj(h)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Module()
            self.model.layers = torch.nn.ModuleList([torch.nn.Module()])
            self.model.layers[0].mlp = Mlp()

        def forward(self, x, gain=None):
            return self.model.layers[0].mlp(x, gain=gain)

    return Model().to(dtype).eval()


def _batches(torch, dtype, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(2, 7, 128, generator=g)
        x[..., :4] *= 25  # a few important features
        out.append(x.to(dtype))
    return out


LINEARS = ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"]


def _observer_statistics(torch, model, batches):
    """What qobs's imatrix observer accumulates through its own attach hook."""
    args = qobs.QuantizationArgs(num_bits=4, strategy="group", group_size=32)
    obs = {n: qobs.IMatrixMSEObserver(base_name="weight", args=args) for n in LINEARS}
    for n, o in obs.items():
        o.attach(model.get_submodule(n))
    with torch.no_grad():
        for b in batches:
            model(b)
    out = {}
    for n, o in obs.items():
        o.detach()
        s = o.export_statistics()
        out[n] = (qobs.to_numpy(s.find("importance_sum")), int(qobs.to_numpy(s.find("importance_count"))))
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_collect_equals_the_observer_hooks_bit_for_bit(torch, tmp_path, dtype):
    dt = getattr(torch, dtype)
    model = _block(torch, dt)
    batches = _batches(torch, dt, 3)
    path = tmp_path / "imp.safetensors"
    with pytest.warns(UserWarning, match="no input reached model.layers.0.mlp.unused"):
        got = qobs.collect_importance(model, batches, path)
    want = _observer_statistics(torch, model, batches)
    assert sorted(got) == sorted(LINEARS)  # the unreached Linear is left out
    for n in LINEARS:
        assert got[n][0].dtype == np.float32
        assert got[n][0].tobytes() == want[n][0].tobytes(), n
        assert got[n][1] == want[n][1] == 3 * 2 * 7, n
    back = qobs.read_importance(path)
    for n in LINEARS:
        assert back[n][0].tobytes() == got[n][0].tobytes() and back[n][1] == got[n][1]
    # the file as any safetensors reader sees it
    raw = path.read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["__metadata__"]["qobs.format"] == "qobs-importance"
    assert header["model.layers.0.mlp.up_proj.importance_sum"]["dtype"] == "F32"
    assert header["model.layers.0.mlp.up_proj.importance_sum"]["shape"] == [128]
    assert header["model.layers.0.mlp.up_proj.importance_count"] == {
        "dtype": "I64", "shape": [], "data_offsets": header["model.layers.0.mlp.up_proj.importance_count"]["data_offsets"]}
    assert model.training is False and all(not m._forward_pre_hooks for m in model.modules())


def test_collect_equals_the_llmcompressor_plugin_bit_for_bit(torch, llmcompressor):
    """The qobs_imatrix_mse observer in llm-compressor accumulates the same bits;
    llm-compressor's built-in imatrix_mse sums in its own order (torch's f32 reduction),
    so it agrees up to that order (docs/RULES.md A2)."""
    import qobs.llmcompressor  # noqa: F401  (registers qobs_imatrix_mse)
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.observers import Observer

    model = _block(torch, torch.bfloat16)
    batches = _batches(torch, torch.bfloat16, 4, seed=7)
    got = qobs.collect_importance(model, batches, modules=LINEARS)
    args = QuantizationArgs(num_bits=4, strategy="group", group_size=32)
    plugin = {n: Observer.load_from_registry("qobs_imatrix_mse", base_name="weight", args=args) for n in LINEARS}
    builtin = {n: Observer.load_from_registry("imatrix_mse", base_name="weight", args=args) for n in LINEARS}
    for n in LINEARS:
        plugin[n].attach(model.get_submodule(n))
        builtin[n].attach(model.get_submodule(n))
    with torch.no_grad():
        for b in batches:
            model(b)
    for n in LINEARS:
        plugin[n].detach(model.get_submodule(n))
        builtin[n].detach(model.get_submodule(n))
        stats = plugin[n]._qobs.export_statistics()
        assert got[n][0].tobytes() == qobs.to_numpy(stats.find("importance_sum")).tobytes(), n
        assert got[n][1] == int(qobs.to_numpy(stats.find("importance_count"))), n
        np.testing.assert_allclose(got[n][0], builtin[n]._imatrix_sum.float().cpu().numpy(), rtol=1e-5)
        assert got[n][1] == int(builtin[n]._imatrix_count), n


def test_batch_forms_and_module_selection(torch):
    model = _block(torch, torch.float32)
    xs = _batches(torch, torch.float32, 2)
    gain = torch.full((256,), 0.5)
    as_tensors = qobs.collect_importance(model, xs, modules=LINEARS)
    as_dicts = qobs.collect_importance(model, [{"x": x} for x in xs], modules=LINEARS)
    as_tuples = qobs.collect_importance(model, [(x,) for x in xs], modules=LINEARS)
    for n in LINEARS:
        assert as_tensors[n][0].tobytes() == as_dicts[n][0].tobytes() == as_tuples[n][0].tobytes()
    with_gain = qobs.collect_importance(model, [{"x": x, "gain": gain} for x in xs],
                                        modules=lambda name, m: name.endswith("down_proj"))
    assert list(with_gain) == ["model.layers.0.mlp.down_proj"]
    assert not np.array_equal(with_gain["model.layers.0.mlp.down_proj"][0], as_dicts["model.layers.0.mlp.down_proj"][0])
    with pytest.raises(TypeError, match="tokenizer"):
        qobs.collect_importance(model, ["some text"])
    with pytest.raises(ValueError, match="no input reached any Linear"):
        qobs.collect_importance(model, [], modules=LINEARS)


def test_non_finite_inputs_write_nothing(torch, tmp_path):
    model = _block(torch, torch.float32)
    x = _batches(torch, torch.float32, 1)[0]
    x[0, 0, 3] = float("inf")
    path = tmp_path / "imp.safetensors"
    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.\w+_proj\.importance_sum\[\d+\] is .*not a finite"):
        qobs.collect_importance(model, [x], path, modules=LINEARS)
    assert list(tmp_path.iterdir()) == []


def test_merge_equals_collecting_the_concatenated_batches(torch, tmp_path):
    model = _block(torch, torch.bfloat16)
    xs = _batches(torch, torch.bfloat16, 5, seed=3)
    a, b, c, m = (tmp_path / f"{n}.safetensors" for n in "abcm")
    qobs.collect_importance(model, xs[:4], a, modules=LINEARS)
    qobs.collect_importance(model, xs[4:], b, modules=LINEARS)
    merged = qobs.merge_importance([a, b], m)
    whole = qobs.collect_importance(model, xs, modules=LINEARS)
    for n in LINEARS:
        # exact: the second file holds one batch, and the merge rounds a + b to f32 once,
        # as the observer rounds its sum after each batch
        assert merged[n][0].tobytes() == whole[n][0].tobytes(), n
        assert merged[n][1] == whole[n][1] == 5 * 14
    assert qobs.read_importance(m)[LINEARS[0]][0].tobytes() == merged[LINEARS[0]][0].tobytes()
    # more files: counts exact, sums equal up to float32 rounding of the order
    qobs.collect_importance(model, xs[:2], a, modules=LINEARS)
    qobs.collect_importance(model, xs[2:4], b, modules=LINEARS)
    qobs.collect_importance(model, xs[4:], c, modules=LINEARS)
    merged = qobs.merge_importance([a, b, c], m)
    for n in LINEARS:
        assert merged[n][1] == whole[n][1]
        np.testing.assert_allclose(merged[n][0], whole[n][0], rtol=3e-7)


def test_merge_refuses_mismatched_files(torch, tmp_path):
    model = _block(torch, torch.float32)
    xs = _batches(torch, torch.float32, 1)
    a, b, out = tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "out.safetensors"
    qobs.collect_importance(model, xs, a, modules=LINEARS)
    qobs.collect_importance(model, xs, b, modules=LINEARS[:2])
    with pytest.raises(ValueError, match=rf"{b}: has no importance for model\.layers\.0\.mlp\.down_proj.*R6\.12\.4"):
        qobs.merge_importance([a, b], out)
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{}")
    with pytest.raises(OSError, match="junk.safetensors"):
        qobs.merge_importance([a, tmp_path / "junk.safetensors"], out)
    assert not out.exists()


def _write_checkpoint(torch, model, folder):
    """A plain safetensors checkpoint of `model` (bfloat16 written as its raw bits)."""
    folder.mkdir()
    header, blobs, offset = {}, [], 0
    for name, t in model.state_dict().items():
        t = t.detach().contiguous()
        dtype, bits = ("BF16", t.view(torch.int16)) if t.dtype == torch.bfloat16 else ("F32", t.float())
        raw = bits.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))


@pytest.mark.parametrize("scheme,observer", [("W4A16", "imatrix_mse"), ("NVFP4A16", "nvfp4_expanded_imatrix"),
                                             ("W4A16", "imatrix_lsq")])
def test_cli_quantize_with_collected_importance(torch, qobs_cli, tmp_path, scheme, observer):
    model = _block(torch, torch.bfloat16)
    del model.model.layers[0].mlp.unused
    _write_checkpoint(torch, model, tmp_path / "in")
    imp = tmp_path / "imp.safetensors"
    qobs.collect_importance(model, _batches(torch, torch.bfloat16, 3), imp)
    out = tmp_path / "out"
    base = [str(qobs_cli), "quantize", str(tmp_path / "in"), "-o", str(out), "--scheme", scheme, "--observer", observer,
            "--quiet"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 1 and "--importance FILE" in r.stderr, r.stderr
    r = subprocess.run(base + ["--importance", str(imp)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "qobs-report.json").read_text())
    assert {t["module"] for t in report["tensors"]} == set(LINEARS)
    assert all(t["observer"] == observer for t in report["tensors"])
    cfg = json.loads((out / "config.json").read_text())["quantization_config"]
    assert cfg["config_groups"]["group_0"]["weights"]["observer"] == observer
