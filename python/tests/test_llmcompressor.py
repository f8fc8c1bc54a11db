"""qobs observers inside llm-compressor. Skipped without llmcompressor.

Each qobs_* observer is compared with llm-compressor's own observer of the same name
on identical inputs: the qparams must be bit-identical (the MSE cases here have no
error ties).
"""

import importlib.util
import logging
import pathlib

import pytest

NAMES = ["memoryless_minmax", "static_minmax", "minmax", "memoryless_mse", "mse", "nvfp4_expanded_mse",
         "fouroversix", "imatrix_mse", "nvfp4_expanded_imatrix"]
IMATRIX = ("imatrix_mse", "nvfp4_expanded_imatrix")


@pytest.fixture(scope="module")
def lc(llmcompressor, torch):
    import qobs.llmcompressor  # noqa: F401  (registers)
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.observers import Observer

    return Observer, QuantizationArgs


def _same(a, b, torch):
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.float(), b.float())


def test_registered_names(lc):
    Observer, _ = lc
    names = Observer.registered_names()
    for n in NAMES:
        assert "qobs-" + n.replace("_", "-") in names


ARGS = {
    "int8_channel": dict(num_bits=8, strategy="channel"),
    "int4_group_asym": dict(num_bits=4, strategy="group", group_size=16, symmetric=False),
    "nvfp4": dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, scale_dtype="float8_e4m3fn"),
    "fp8_tensor": dict(num_bits=8, type="float", strategy="tensor"),
}


@pytest.mark.parametrize("name", [n for n in NAMES if n not in IMATRIX])
@pytest.mark.parametrize("argname", list(ARGS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_weight_qparams_match_builtin(lc, torch, name, argname, dtype):
    Observer, QuantizationArgs = lc
    if name in ("nvfp4_expanded_mse", "fouroversix") and argname != "nvfp4":
        pytest.skip(f"{name} is for NVFP4")
    torch.manual_seed(0)
    w = (torch.randn(32, 64) * 0.05).to(getattr(torch, dtype))
    ref = Observer.load_from_registry(name, base_name="weight", args=QuantizationArgs(**ARGS[argname], observer=name))
    ours = Observer.load_from_registry("qobs_" + name, base_name="weight",
                                       args=QuantizationArgs(**ARGS[argname], observer="qobs_" + name))
    assert type(ours).__name__.startswith("Qobs")
    qr, qo = ref(w).get_qparams(), ours(w).get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        assert _same(qr[k], qo[k], torch), k
    assert not ours.has_statistics


@pytest.mark.parametrize("name", ["memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse", "static_minmax"])
@pytest.mark.parametrize("argname", list(ARGS))
def test_update_statistics_from_observed_matches_builtin(lc, torch, name, argname):
    # what llm-compressor's own forward calls, with the value flattened already (R3.1)
    from llmcompressor.observers.helpers import flatten_for_calibration

    Observer, QuantizationArgs = lc
    if name == "nvfp4_expanded_mse" and argname != "nvfp4":
        pytest.skip(f"{name} is for NVFP4")
    torch.manual_seed(3)
    w = (torch.randn(32, 64) * 0.05).to(torch.bfloat16)
    args = QuantizationArgs(**ARGS[argname], observer=name)
    ref = Observer.load_from_registry(name, base_name="weight", args=args)
    ours = Observer.load_from_registry("qobs_" + name, base_name="weight",
                                       args=QuantizationArgs(**ARGS[argname], observer="qobs_" + name))
    flat = flatten_for_calibration(w, "weight", args)
    ref.update_statistics_from_observed(flat)
    ours.update_statistics_from_observed(flat)
    sr, so = ref.get_statistics(), ours.get_statistics()
    for k in ("min_vals", "max_vals"):
        assert _same(sr[k], so[k], torch), k
    qr, qo = ref.get_qparams(), ours.get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        assert _same(qr[k], qo[k], torch), k


@pytest.mark.parametrize("name", ["static_minmax", "minmax", "mse"])
def test_activation_statistics_accumulate_like_builtin(lc, torch, name):
    Observer, QuantizationArgs = lc
    args = dict(num_bits=8, type="float", strategy="tensor")
    ref = Observer.load_from_registry(name, base_name="input", args=QuantizationArgs(**args, observer=name))
    ours = Observer.load_from_registry("qobs_" + name, base_name="input", args=QuantizationArgs(**args))
    torch.manual_seed(1)
    for i in range(4):
        x = torch.randn(2, 8, 32, dtype=torch.bfloat16) * (i + 1)
        ref(x)
        ours(x)
    sr, so = ref.get_statistics(), ours.get_statistics()
    assert _same(sr["min_vals"], so["min_vals"], torch) and _same(sr["max_vals"], so["max_vals"], torch)
    qr, qo = ref.get_qparams(), ours.get_qparams()
    assert _same(qr["scale"], qo["scale"], torch)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_calibration_batches_take_the_fast_path_like_builtin(lc, torch, dtype):
    # Batches large enough for the threaded in-place min-max (>= 2^16 values), as a
    # calibration hook hands them over: requiring grad, non-contiguous, contiguous.
    Observer, QuantizationArgs = lc
    args = dict(num_bits=8, type="int", strategy="tensor", symmetric=True)
    for name in ("static_minmax", "minmax"):
        ref = Observer.load_from_registry(name, base_name="input", args=QuantizationArgs(**args, observer=name))
        ours = Observer.load_from_registry("qobs_" + name, base_name="input", args=QuantizationArgs(**args))
        torch.manual_seed(2)
        for i in range(3):
            x = (torch.randn(4, 128, 520) * (i + 1)).to(getattr(torch, dtype))
            x[1, 7, 3] = -0.0
            batch = [x.requires_grad_(dtype == "float32"), x.detach().transpose(1, 2), x.detach()][i]
            ref(batch.detach())
            ours(batch)
        sr, so = ref.get_statistics(), ours.get_statistics()
        assert _same(sr["min_vals"], so["min_vals"], torch) and _same(sr["max_vals"], so["max_vals"], torch)


def test_observer_kwargs_reach_the_core(lc, torch):
    Observer, QuantizationArgs = lc
    args = QuantizationArgs(num_bits=8, strategy="tensor")
    with pytest.raises(ValueError, match="expand value must be at least 1.0"):
        Observer.load_from_registry("qobs_memoryless_mse", base_name="weight", args=args, expand=0.5)
    ours = Observer.load_from_registry("qobs_minmax", base_name="input", args=QuantizationArgs(num_bits=8),
                                       averaging_constant=0.5)
    assert ours.args.observer_kwargs["averaging_constant"] == 0.5  # merged like llm-compressor does (Q25)
    ours(torch.tensor([[0.0, 2.0]]))
    ours(torch.tensor([[0.0, 4.0]]))
    assert ours.get_statistics()["max_vals"].item() == 3.0


def test_weight_observer_override_is_logged_once(lc, monkeypatch, caplog):
    # llm-compressor warns when it swaps a weight observer for its memoryless variant
    # (initialize_observer, once per message); qobs does the same swap for its names.
    Observer, QuantizationArgs = lc
    import qobs.llmcompressor as qlc

    monkeypatch.setattr(qlc, "_warned", set())
    args = QuantizationArgs(num_bits=8, strategy="channel")
    with caplog.at_level(logging.WARNING, logger="qobs"):
        for name, base in [("qobs_mse", "weight"), ("qobs_mse", "weight"), ("qobs_mse", "input"),
                           ("qobs_memoryless_mse", "weight"), ("qobs_static_minmax", "weight")]:
            Observer.load_from_registry(name, base_name=base, args=args)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("qobs.llmcompressor", logging.WARNING,
         "Overriding weight observer for lower memory usage (qobs_mse -> qobs_memoryless_mse)"),
        ("qobs.llmcompressor", logging.WARNING,
         "Overriding weight observer for lower memory usage (qobs_static_minmax -> qobs_memoryless_minmax)"),
    ]


@pytest.mark.parametrize("name,argname", [("imatrix_mse", "int4_group32"), ("nvfp4_expanded_imatrix", "nvfp4")])
def test_imatrix_hooks_match_builtin(lc, torch, name, argname):
    Observer, QuantizationArgs = lc
    torch.manual_seed(2)
    lin = torch.nn.Linear(64, 16).to(torch.bfloat16)
    args = dict(ARGS, int4_group32=dict(num_bits=4, strategy="group", group_size=32))[argname]
    ref = Observer.load_from_registry(name, base_name="weight", args=QuantizationArgs(**args))
    ours = Observer.load_from_registry("qobs_" + name, base_name="weight", args=QuantizationArgs(**args))
    ref.attach(lin)
    ours.attach(lin)
    for _ in range(4):
        x = torch.randn(2, 8, 64).to(torch.bfloat16)
        x[..., :4] *= 20
        lin(x)
    qr, qo = ref(lin.weight).get_qparams(), ours(lin.weight).get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        assert _same(qr[k], qo[k], torch), k
    ours.detach(lin)
    ref.detach(lin)
    assert len(lin._forward_pre_hooks) == 0


def _fused_block(torch, QuantizationArgs, Observer, name):
    block = torch.nn.Module()
    torch.manual_seed(3)
    for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
        lin = torch.nn.Linear(32, 16 * (i + 1), bias=False).to(torch.bfloat16)
        lin.weight.data *= i + 1
        args = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                                scale_dtype=torch.float8_e4m3fn)
        lin.register_module("weight_observer", Observer.load_from_registry(name, base_name="weight", args=args))
        block.register_module(proj, lin)
    return block


def test_fusion_through_llmcompressor_matches_builtin(lc, torch):
    Observer, QuantizationArgs = lc
    from llmcompressor.observers import fuse_weight_observers

    results = {}
    for name in ("memoryless_minmax", "qobs_memoryless_minmax"):
        block = _fused_block(torch, QuantizationArgs, Observer, name)
        fuse_weight_observers(block)
        block.q_proj.weight_observer(block.q_proj.weight)  # partners observed on demand
        results[name] = [getattr(block, p).weight_observer.get_qparams() for p in ("q_proj", "k_proj", "v_proj")]
        assert not any(getattr(block, p).weight_observer.has_statistics for p in ("q_proj", "k_proj", "v_proj"))
    for qr, qo in zip(results["memoryless_minmax"], results["qobs_memoryless_minmax"]):
        for k in ("scale", "zero_point", "global_scale"):
            assert _same(qr[k], qo[k], torch), k
    gs = [q["global_scale"].item() for q in results["qobs_memoryless_minmax"]]
    assert gs[0] == gs[1] == gs[2]


def test_fusing_qobs_with_builtin_observers_is_refused(lc, torch):
    Observer, QuantizationArgs = lc
    from llmcompressor.observers import fuse_weight_observers

    block = _fused_block(torch, QuantizationArgs, Observer, "qobs_memoryless_minmax")
    args = QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16)
    block.k_proj.register_module("weight_observer", Observer.load_from_registry("memoryless_minmax",
                                                                               base_name="weight", args=args))
    fuse_weight_observers(block)
    with pytest.raises(AssertionError, match="qobs observers"):
        block.q_proj.weight_observer(block.q_proj.weight)


def _example():
    for mod in ("transformers", "datasets", "tokenizers"):
        pytest.importorskip(mod)
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "llmcompressor_oneshot.py"
    spec = importlib.util.spec_from_file_location("llmcompressor_oneshot", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_oneshot_example(lc):
    """examples/llmcompressor_oneshot.py: oneshot with qobs observers on a tiny model."""
    assert _example().main() == 0


@pytest.mark.parametrize("name", ["static_minmax", "minmax", "memoryless_minmax"])
def test_sync_activation_stats_single_process_group(lc, torch, tmp_path, name):
    """DDP sync over a one-process gloo group: the all-reduce runs and leaves the
    statistics as they were (MIN/MAX/AVG of one rank)."""
    import torch.distributed as dist

    Observer, QuantizationArgs = lc
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        ours = Observer.load_from_registry("qobs_" + name, base_name="input", args=QuantizationArgs(num_bits=8))
        ours(torch.tensor([[-2.0, 5.0]], dtype=torch.bfloat16))
        before = ours.get_statistics()
        assert ours.sync_activation_stats() == []
        after = ours.get_statistics()
        for k in ("min_vals", "max_vals"):
            assert after[k].dtype == before[k].dtype and torch.equal(after[k], before[k])
    finally:
        dist.destroy_process_group()


def test_fouroversix_warns_like_the_reference(lc):
    Observer, QuantizationArgs = lc
    args = QuantizationArgs(**ARGS["nvfp4"])
    with pytest.warns(UserWarning, match="alias"):
        ours = Observer.load_from_registry("qobs_fouroversix", base_name="weight", args=args)
    assert ours._qobs.name == "nvfp4_expanded_mse"  # R6.13.1: the alias builds nvfp4_expanded_mse


@pytest.mark.parametrize("name", IMATRIX)
def test_requires_calibration_data_is_inferred_only_for_builtin_names(lc, name):
    """R6.12.3: llm-compressor picks its data pipeline by exact observer name."""
    _, QuantizationArgs = lc
    from compressed_tensors.quantization import QuantizationScheme
    from llmcompressor.modifiers.quantization import QuantizationModifier

    def needs_data(observer):
        scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**ARGS["nvfp4"], observer=observer))
        return QuantizationModifier(config_groups={"g": scheme}).requires_calibration_data

    assert needs_data(name)
    assert not needs_data("qobs_" + name)


@pytest.mark.parametrize("name,weights", [
    ("imatrix_mse", dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)),
    ("nvfp4_expanded_imatrix", ARGS["nvfp4"]),
])
def test_imatrix_observer_in_datafree_oneshot_raises(lc, tmp_path, name, weights):
    """Issue "qobs_imatrix_mse silently calibrates without data": without
    requires_calibration_data llm-compressor runs its data-free pipeline, no input reaches
    the modules, and the qobs imatrix observers used to calibrate without importance (0 of
    28 qparams matched the run with data, no warning). Now they raise, naming the module
    and the fix (R6.12.3, D15)."""
    example = _example()
    example.save_tiny_llama(str(tmp_path))
    with pytest.raises(ValueError, match="no importance data") as err:
        example.run(example.load(str(tmp_path)), weights, None, "qobs_" + name, None)
    msg = str(err.value)
    assert "requires_calibration_data=True" in msg
    assert "model.layers.0." in msg, msg  # the module's name in the model
