"""qobs.cuda and the llm-compressor plugin's device path.

Without a CUDA device (qobs built without CUDA, no driver, no GPU): qobs.cuda reports
the runtime's reason, calibrate_weight refuses with a clear error, QOBS_CUDA=0 is read,
and the plugin's device-path bookkeeping (fused groups, partners observed on demand,
cooperative deletion, the host fallback of mixed groups, the fallback log) runs against
a host stand-in of qobs.cuda that computes with the host observers. With a device
(tools/gpu_check.sh): calibrate_weight and the plugin on CUDA tensors give the host
observers' bytes; the device tests are skipped elsewhere, naming the reason.
"""

import logging
import os

import pytest

import qobs
import qobs.cuda

INT4_SYM = dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128)
INT4_ASYM = dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=128)
FP8_CHANNEL = dict(num_bits=8, type="float", symmetric=True, strategy="channel")
NVFP4 = dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16,
             scale_dtype="float8_e4m3fn")
MXFP4 = dict(num_bits=4, type="float", symmetric=True, strategy="group", group_size=32, scale_dtype="uint8")
FORMATS = {"int4_g128_sym": INT4_SYM, "int4_g128_asym": INT4_ASYM, "fp8_channel": FP8_CHANNEL, "nvfp4": NVFP4,
           "mxfp4": MXFP4}
DEVICE_OBSERVERS = ("memoryless_minmax", "memoryless_mse", "nvfp4_expanded_mse")


def _device(torch):
    """Skip unless both qobs and torch see a CUDA device."""
    if not qobs.cuda.available():
        pytest.skip("no CUDA device: " + qobs.cuda.unavailable_reason())
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch.device("cuda", 0)


def _weight(torch, rows, cols, seed, dtype="float32"):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * 0.02
    w[:, ::97] *= 15  # outliers
    return w.to(getattr(torch, dtype))


def _same_bytes(torch, a, b):
    if a is None or b is None:
        return a is None and b is None
    a, b = a.detach().cpu(), b.detach().cpu()
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def _host_qparams(name, args, w):
    return qobs.Observer.load_from_registry(name, base_name="weight", args=qobs.QuantizationArgs(**args))(
        w.detach().cpu()).get_qparams()


# -- without a device -------------------------------------------------------------------


def test_without_a_device_the_runtime_says_why():
    if qobs.cuda.available():
        pytest.skip("a CUDA device is present")
    reason = qobs.cuda.unavailable_reason()
    assert reason and ("CUDA" in reason or "device" in reason), reason
    assert qobs.cuda_available() is False
    assert qobs.cuda.device_count() == 0
    with pytest.raises(OSError, match="no CUDA device"):
        qobs.cuda.describe_device(0)


def test_with_a_device_it_is_described(torch):
    _device(torch)
    assert qobs.cuda_available() is True
    assert qobs.cuda.unavailable_reason() == ""
    assert qobs.cuda.device_count() >= 1
    assert "sm_" in qobs.cuda.describe_device(0)


def test_calibrate_weight_refuses_what_is_not_a_cuda_tensor(torch):
    obs = qobs.Observer.load_from_registry("memoryless_minmax", base_name="weight", args=qobs.QuantizationArgs(**INT4_SYM))
    with pytest.raises(ValueError, match="not a CUDA device"):
        qobs.cuda.calibrate_weight(obs, torch.zeros(4, 128))
    with pytest.raises(TypeError, match="torch tensor"):
        qobs.cuda.calibrate_weight(obs, [[0.0] * 128])
    with pytest.raises(ValueError, match="fused weight is on device 'cpu'"):
        qobs.cuda.calibrate_weight(obs, _FakeCudaTensor.of(torch, torch.zeros(4, 128)), fused=[torch.zeros(4, 128)])


class _FakeCudaTensor:
    """A host tensor that says it is a CUDA tensor: what a caller of calibrate_weight
    holds on a machine where torch sees a GPU and qobs does not."""

    @staticmethod
    def of(torch, t):
        cls = type("FakeCuda", (torch.Tensor,), {"is_cuda": property(lambda self: True)})
        return torch.Tensor._make_subclass(cls, t)


def test_calibrate_weight_without_a_device_raises(torch):
    if qobs.cuda.available():
        pytest.skip("a CUDA device is present")
    obs = qobs.Observer.load_from_registry("memoryless_minmax", base_name="weight", args=qobs.QuantizationArgs(**INT4_SYM))
    with pytest.raises(OSError, match="no CUDA device: " + qobs.cuda.unavailable_reason()[:20]):
        qobs.cuda.calibrate_weight(obs, _FakeCudaTensor.of(torch, torch.zeros(4, 128)))


def test_qobs_cuda_0_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("QOBS_CUDA", "0")
    assert qobs.cuda.host_reason() == "QOBS_CUDA=0 in the environment"
    monkeypatch.setenv("QOBS_CUDA", "1")
    assert qobs.cuda.host_reason() == ("" if qobs.cuda.available() else "no CUDA device: " + qobs.cuda.unavailable_reason())
    monkeypatch.delenv("QOBS_CUDA")
    assert qobs.cuda.host_reason() == ("" if qobs.cuda.available() else "no CUDA device: " + qobs.cuda.unavailable_reason())


def test_device_unsupported_says_why(torch):
    lsq = qobs.Observer.load_from_registry("lsq_mse", base_name="weight",
                                           args=qobs.QuantizationArgs(num_bits=4, strategy="group", group_size=16))
    w = torch.zeros(4, 32)  # only the shape, dtype and strides are read
    why = qobs.cuda.device_unsupported(lsq, w)
    assert why == (qobs.cuda.unavailable_reason() if not qobs.cuda.available() else
                   "observer lsq_mse has no device path; it runs on the CPU")
    assert "lazy negation" in qobs.cuda.device_unsupported(lsq, torch._neg_view(w))


# -- the plugin's device path against a host stand-in of qobs.cuda -------------------------


class _HostStandIn:
    """What llmcompressor.py calls of qobs.cuda, computed by host observers: every torch
    tensor counts as device memory. It checks the plugin's bookkeeping (which
    statistics reach which call), not the device."""

    WeightStatistics = qobs.cuda.WeightStatistics

    def __init__(self, torch, unsupported=(), host_reason=None):
        self.torch = torch
        self.unsupported = set(unsupported)
        self.observed = []  # the observer name of each observe_weight call
        self._host_reason = host_reason

    def is_device_tensor(self, t):
        return isinstance(t, self.torch.Tensor)

    def host_reason(self):
        return self._host_reason() if self._host_reason else ""

    def device_unsupported(self, observer, weight):
        return "no device path (stand-in)" if observer.name in self.unsupported else ""

    @staticmethod
    def _fresh(observer):
        return qobs.Observer.load_from_registry(observer.name, base_name=observer.base_name, args=observer.args)

    def observe_weight(self, observer, weight):
        assert observer.name not in self.unsupported
        o = self._fresh(observer)
        o(weight.detach())
        self.observed.append(observer.name)
        return qobs.cuda.WeightStatistics(o.export_statistics(), None, weight.device)

    def _cores(self, observer, stats, fused):
        cores = []
        for s in (fused or [stats]):
            c = self._fresh(observer)
            c.import_statistics(qobs.Statistics("", s.stats.items, 1))
            cores.append(c)
        if fused:
            assert fused[0] is stats
            qobs.fuse_observers(cores)
        return cores  # the first is this observer's; fused partners are held weakly, so keep them

    def qparams_of(self, observer, stats, fused=()):
        cores = self._cores(observer, stats, fused)
        s, z, g = cores[0]._core.get_qparams()
        return {"scale": s.torch(), "zero_point": z.torch(), "global_scale": None if g is None else g.torch()}

    def global_scale_of(self, observer, stats, fused=()):
        cores = self._cores(observer, stats, fused)
        g = cores[0]._core.get_global_scale()
        return None if g is None else g.torch()

    def statistics_of(self, stats):
        return {n: t.torch() for n, t, _ in stats.stats.items}


@pytest.fixture
def lc(llmcompressor, torch):
    import qobs.llmcompressor as qlc
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.observers import Observer

    return qlc, Observer, QuantizationArgs


def _lc_observer(lc, name, base, args):
    _, Observer, QuantizationArgs = lc
    return Observer.load_from_registry("qobs_" + name, base_name=base,
                                       args=QuantizationArgs(**args, observer="qobs_" + name))


@pytest.mark.parametrize("name", DEVICE_OBSERVERS)
@pytest.mark.parametrize("fmt", ["int4_g128_asym", "nvfp4"])
def test_plugin_keeps_weight_statistics_on_the_device(lc, torch, monkeypatch, name, fmt):
    qlc = lc[0]
    if name == "nvfp4_expanded_mse" and fmt != "nvfp4":
        pytest.skip("nvfp4_expanded_mse is for NVFP4")
    w = _weight(torch, 64, 256, 1, "bfloat16")
    want = _lc_observer(lc, name, "weight", FORMATS[fmt])(w).get_qparams()
    dev = _HostStandIn(torch)
    monkeypatch.setattr(qlc, "_cuda", dev)
    ours = _lc_observer(lc, name, "weight", FORMATS[fmt])
    ours(w)
    assert ours._dev_stats is not None and not ours._qobs.has_statistics and ours.has_statistics
    ours(w * 2)  # a weight is observed once (R6.1.2-2)
    assert dev.observed == [name]
    st = ours.get_statistics()
    assert set(st) == {"min_vals", "max_vals"}
    g = ours.get_global_scale()
    assert _same_bytes(torch, g, want["global_scale"])
    got = ours.get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        assert _same_bytes(torch, got[k], want[k]), k
    assert not ours.has_statistics and ours._dev_stats is None


def _block(lc, torch, names=("memoryless_minmax",) * 3):
    _, Observer, QuantizationArgs = lc
    block = torch.nn.Module()
    for i, (proj, name) in enumerate(zip(("q_proj", "k_proj", "v_proj"), names)):
        lin = torch.nn.Linear(32, 16 * (i + 1), bias=False)
        with torch.no_grad():
            lin.weight.copy_(_weight(torch, 16 * (i + 1), 32, 10 + i) * (i + 1))
        lin.to(torch.bfloat16)
        lin.register_module("weight_observer", _lc_observer(lc, name, "weight", NVFP4))
        block.register_module(proj, lin)
    return block


PROJ = ("q_proj", "k_proj", "v_proj")


def _fused_run(lc, torch, block, late_fuse=False):
    from llmcompressor.observers import fuse_weight_observers

    if not late_fuse:
        fuse_weight_observers(block)
    block.q_proj.weight_observer(block.q_proj.weight)
    if late_fuse:
        fuse_weight_observers(block)
    out = []
    for i, p in enumerate(PROJ):
        out.append(getattr(block, p).weight_observer.get_qparams())
        # cooperative deletion (R6.10.4): the statistics go when the last member is done
        still = [getattr(block, q).weight_observer.has_statistics for q in PROJ]
        assert still == ([True] * 3 if i < 2 else [False] * 3), (p, still)
    return out


def test_plugin_fused_group_on_the_device(lc, torch, monkeypatch):
    qlc = lc[0]
    want = _fused_run(lc, torch, _block(lc, torch))
    dev = _HostStandIn(torch)
    monkeypatch.setattr(qlc, "_cuda", dev)
    block = _block(lc, torch)
    got = _fused_run(lc, torch, block)
    assert dev.observed == ["memoryless_minmax"] * 3  # the partners observed with q (R6.1.2-5)
    for w, o in zip(want, got):
        for k in ("scale", "zero_point", "global_scale"):
            assert _same_bytes(torch, o[k], w[k]), k
    assert got[0]["global_scale"].item() == got[1]["global_scale"].item() == got[2]["global_scale"].item()
    assert all(getattr(block, p).weight_observer._dev_stats is None for p in PROJ)


@pytest.mark.parametrize("case", ["unsupported partner", "partner with host statistics", "fused after observing"])
def test_plugin_fused_group_with_a_member_off_the_device_runs_on_the_host(lc, torch, monkeypatch, caplog, case):
    qlc = lc[0]
    names = ("memoryless_minmax", "memoryless_mse", "memoryless_minmax")
    want = _fused_run(lc, torch, _block(lc, torch, names))
    monkeypatch.setattr(qlc, "_warned", set())
    dev = _HostStandIn(torch, unsupported={"memoryless_mse"} if case != "partner with host statistics" else ())
    monkeypatch.setattr(qlc, "_cuda", dev)
    block = _block(lc, torch, names)
    if case == "partner with host statistics":
        from llmcompressor.observers import fuse_weight_observers
        from llmcompressor.observers.helpers import flatten_for_calibration

        # k's statistics made on the host, the same as observing its weight there
        k = block.k_proj
        k.weight_observer.update_statistics_from_observed(flatten_for_calibration(k.weight, "weight", k.weight_observer.args))
        fuse_weight_observers(block)
        block.q_proj.weight_observer(block.q_proj.weight)
        got = [getattr(block, p).weight_observer.get_qparams() for p in PROJ]
        reason = "a fused partner holds host statistics"
    else:
        with caplog.at_level(logging.WARNING, logger="qobs"):
            got = _fused_run(lc, torch, block, late_fuse=case == "fused after observing")
        reason = "a fused partner: no device path (stand-in)"
    for w, o in zip(want, got):
        for k in ("scale", "zero_point", "global_scale"):
            assert _same_bytes(torch, o[k], w[k]), k
    if case != "partner with host statistics":
        messages = [r.getMessage() for r in caplog.records if r.name == "qobs.llmcompressor"]
        assert len(messages) == 1 and messages[0].endswith(reason), messages
    # everything ended on the host: no device statistics left behind
    assert all(getattr(block, p).weight_observer._dev_stats is None for p in PROJ)
    assert not any(getattr(block, p).weight_observer.has_statistics for p in PROJ)


def test_plugin_logs_each_fallback_once_per_observer_and_reason(lc, torch, monkeypatch, caplog):
    qlc = lc[0]
    monkeypatch.setattr(qlc, "_warned", set())
    monkeypatch.setattr(qlc, "_cuda", _HostStandIn(torch, unsupported={"memoryless_mse"}))
    w = _weight(torch, 16, 128, 2)
    with caplog.at_level(logging.INFO, logger="qobs"):
        for _ in range(3):
            _lc_observer(lc, "memoryless_mse", "weight", INT4_SYM)(w).get_qparams()
        _lc_observer(lc, "memoryless_minmax", "weight", INT4_SYM)(w).get_qparams()
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "qobs.llmcompressor"] == [
        (logging.WARNING, "qobs_memoryless_mse (weight): CUDA tensor calibrated on the host (copied there): "
                          "no device path (stand-in)")]


def test_plugin_honours_qobs_cuda_0(lc, torch, monkeypatch, caplog):
    qlc = lc[0]
    monkeypatch.setattr(qlc, "_warned", set())
    monkeypatch.setattr(qobs.cuda, "available", lambda: True)  # as where a device is present
    dev = _HostStandIn(torch, host_reason=qobs.cuda.host_reason)
    monkeypatch.setattr(qlc, "_cuda", dev)
    w = _weight(torch, 16, 128, 3)
    monkeypatch.setenv("QOBS_CUDA", "0")
    with caplog.at_level(logging.INFO, logger="qobs"):
        ours = _lc_observer(lc, "memoryless_minmax", "weight", INT4_SYM)(w)
    assert ours._dev_stats is None and ours._qobs.has_statistics and dev.observed == []
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "qobs.llmcompressor"] == [
        (logging.INFO, "qobs_memoryless_minmax (weight): CUDA tensor calibrated on the host (copied there): "
                       "QOBS_CUDA=0 in the environment")]
    monkeypatch.delenv("QOBS_CUDA")
    ours = _lc_observer(lc, "memoryless_minmax", "weight", INT4_SYM)(w)
    assert ours._dev_stats is not None and dev.observed == ["memoryless_minmax"]


# -- on a CUDA device ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name", DEVICE_OBSERVERS)
def test_calibrate_weight_equals_the_host_observer(torch, name, fmt, dtype):
    dev = _device(torch)
    w = _weight(torch, 256, 512, 7, dtype)
    args = qobs.QuantizationArgs(**FORMATS[fmt])
    obs = qobs.Observer.load_from_registry(name, base_name="weight", args=args)
    why = qobs.cuda.device_unsupported(obs, w.to(dev))
    if "libm powf" in why:  # f32 errors of a norm this host's powf gives and the device cannot replay
        pytest.skip(why)
    assert why == "", why
    want = _host_qparams(name, FORMATS[fmt], w)
    got = qobs.cuda.calibrate_weight(obs, w.to(dev))
    for k in ("scale", "zero_point", "global_scale"):
        assert got[k] is None or got[k].device == dev, k
        assert _same_bytes(torch, got[k], want[k]), k
    assert not obs.has_statistics  # the observer's configuration only


@pytest.mark.parametrize("view", ["transposed", "every other column", "offset"])
@pytest.mark.parametrize("name", DEVICE_OBSERVERS)
def test_calibrate_weight_reads_strided_weights(torch, name, view):
    dev = _device(torch)
    big = _weight(torch, 512, 1024, 8, "bfloat16").to(dev)
    w = {"transposed": big[:256].t(), "every other column": big[:, ::2], "offset": big[8:264, 16:528]}[view]
    assert not w.is_contiguous()
    fmt = NVFP4 if name == "nvfp4_expanded_mse" else INT4_ASYM
    obs = qobs.Observer.load_from_registry(name, base_name="weight", args=qobs.QuantizationArgs(**fmt))
    want = _host_qparams(name, fmt, w)
    got = qobs.cuda.calibrate_weight(obs, w)
    for k in ("scale", "zero_point", "global_scale"):
        assert _same_bytes(torch, got[k], want[k]), k


@pytest.mark.parametrize("name", DEVICE_OBSERVERS)
def test_calibrate_weight_fused_members_share_the_global_scale(torch, name):
    dev = _device(torch)
    ws = [_weight(torch, rows, 256, 20 + i, "bfloat16") * (i + 1) for i, rows in enumerate((128, 64, 64))]
    args = qobs.QuantizationArgs(**NVFP4)
    host = [qobs.Observer.load_from_registry(name, base_name="weight", args=args) for _ in ws]
    qobs.fuse_observers(host, weights=ws)
    host[0](ws[0])
    want = [o.get_qparams() for o in host]
    obs = [qobs.Observer.load_from_registry(name, base_name="weight", args=args) for _ in ws]
    dws = [w.to(dev) for w in ws]
    got = []
    for i in range(3):
        others = [(obs[j], dws[j]) for j in range(3) if j != i]
        got.append(qobs.cuda.calibrate_weight(obs[i], dws[i], fused=others))
    for w, g in zip(want, got):
        for k in ("scale", "zero_point", "global_scale"):
            assert _same_bytes(torch, g[k], w[k]), k
    assert len({g["global_scale"].item() for g in got}) == 1


def test_calibrate_weight_runs_on_torchs_current_stream(torch):
    dev = _device(torch)
    src = _weight(torch, 256, 512, 9, "bfloat16").to(dev)
    w = torch.zeros_like(src)
    obs = qobs.Observer.load_from_registry("memoryless_mse", base_name="weight", args=qobs.QuantizationArgs(**INT4_ASYM))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # the side stream stays busy, then writes the weight: read on another stream,
        # it would still be zeros
        torch.cuda._sleep(200_000_000)
        w.copy_(src)
        got = qobs.cuda.calibrate_weight(obs, w)
    torch.cuda.current_stream().wait_stream(side)
    want = _host_qparams("memoryless_mse", INT4_ASYM, src)
    for k in ("scale", "zero_point"):
        assert _same_bytes(torch, got[k], want[k]), k


def test_calibrate_weight_rejects_non_finite_weights(torch):
    dev = _device(torch)
    w = _weight(torch, 16, 128, 4)
    w[3, 77] = float("nan")
    obs = qobs.Observer.load_from_registry("memoryless_minmax", base_name="weight", args=qobs.QuantizationArgs(**INT4_SYM))
    with pytest.raises(ValueError, match="non-finite value nan at flat index 461"):
        qobs.cuda.calibrate_weight(obs, w.to(dev))


def test_calibrate_weight_refuses_observers_without_a_device_path(torch):
    dev = _device(torch)
    obs = qobs.Observer.load_from_registry("lsq_mse", base_name="weight", args=qobs.QuantizationArgs(**INT4_SYM))
    with pytest.raises(ValueError, match="lsq_mse has no device path"):
        qobs.cuda.calibrate_weight(obs, _weight(torch, 16, 128, 5).to(dev))


@pytest.mark.parametrize("name", DEVICE_OBSERVERS)
@pytest.mark.parametrize("fmt", ["int4_g128_sym", "nvfp4"])
def test_plugin_on_cuda_weights_equals_the_host_path(lc, torch, name, fmt):
    dev = _device(torch)
    if name == "nvfp4_expanded_mse" and fmt != "nvfp4":
        pytest.skip("nvfp4_expanded_mse is for NVFP4")
    w = _weight(torch, 128, 512, 11, "bfloat16")
    want = _lc_observer(lc, name, "weight", FORMATS[fmt])(w).get_qparams()
    ours = _lc_observer(lc, name, "weight", FORMATS[fmt])
    ours(w.to(dev))
    assert ours._dev_stats is not None and not ours._qobs.has_statistics
    got = ours.get_qparams()
    for k in ("scale", "zero_point", "global_scale"):
        assert got[k] is None or got[k].device == dev
        assert _same_bytes(torch, got[k], want[k]), k


def test_plugin_fused_group_on_cuda(lc, torch):
    dev = _device(torch)
    want = _fused_run(lc, torch, _block(lc, torch))
    block = _block(lc, torch).to(dev)
    got = _fused_run(lc, torch, block)
    for w, o in zip(want, got):
        for k in ("scale", "zero_point", "global_scale"):
            assert o[k].device == dev and _same_bytes(torch, o[k], w[k]), k


def test_plugin_on_cuda_falls_back_for_observers_without_a_device_path(lc, torch, monkeypatch, caplog):
    qlc = lc[0]
    dev = _device(torch)
    monkeypatch.setattr(qlc, "_warned", set())
    w = _weight(torch, 32, 128, 12, "bfloat16")
    want = _lc_observer(lc, "lsq_mse", "weight", INT4_SYM)(w).get_qparams()
    with caplog.at_level(logging.INFO, logger="qobs"):
        for _ in range(2):
            ours = _lc_observer(lc, "lsq_mse", "weight", INT4_SYM)
            got = ours(w.to(dev)).get_qparams()
    assert [r.getMessage() for r in caplog.records if r.name == "qobs.llmcompressor"] == [
        "qobs_lsq_mse (weight): CUDA tensor calibrated on the host (copied there): "
        "observer lsq_mse has no device path; it runs on the CPU"]
    for k in ("scale", "zero_point"):
        assert got[k].device == dev and _same_bytes(torch, got[k], want[k]), k


def test_plugin_on_cuda_with_qobs_cuda_0_stays_on_the_host(lc, torch, monkeypatch):
    dev = _device(torch)
    monkeypatch.setenv("QOBS_CUDA", "0")
    w = _weight(torch, 32, 256, 13, "bfloat16")
    ours = _lc_observer(lc, "memoryless_mse", "weight", INT4_SYM)
    ours(w.to(dev))
    assert ours._dev_stats is None and ours._qobs.has_statistics
    got = ours.get_qparams()
    want = _host_qparams("memoryless_mse", INT4_SYM, w)
    assert got["scale"].device == dev and _same_bytes(torch, got["scale"], want["scale"])


def _example():
    import importlib.util
    import pathlib

    for mod in ("transformers", "datasets", "tokenizers"):
        pytest.importorskip(mod)
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "llmcompressor_oneshot.py"
    spec = importlib.util.spec_from_file_location("llmcompressor_oneshot", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.mark.parametrize("scheme", ["W4A16 group32 mse", "NVFP4A16 minmax", "FP8 static input"])
def test_oneshot_on_cuda_equals_the_host_path(lc, torch, monkeypatch, tmp_path, scheme):
    """llm-compressor's oneshot on a tiny random Llama on the GPU with qobs observers:
    the same qparams with the device path as with QOBS_CUDA=0 (every tensor copied to
    the host and calibrated there), and the device path taken."""
    dev = _device(torch)
    example = _example()
    example.save_tiny_llama(str(tmp_path))
    weights, inputs, observer = example.SCHEMES[scheme]
    data = example.calibration_data() if inputs is not None else None
    calls = []
    observe = qobs.cuda.observe_weight
    monkeypatch.setattr(qobs.cuda, "observe_weight", lambda o, w: calls.append(o.name) or observe(o, w))
    results = {}
    for env in ("0", None):
        if env is None:
            monkeypatch.delenv("QOBS_CUDA", raising=False)
        else:
            monkeypatch.setenv("QOBS_CUDA", env)
        model = example.load(str(tmp_path)).to(dev)
        results[env] = example.run(model, weights, inputs, "qobs_" + observer, data)
        assert bool(calls) == (env is None), calls
    same, total, diffs = example.compare(results["0"], results[None])
    assert total > 0 and same == total, diffs
