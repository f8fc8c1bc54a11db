"""qobs.cuda and the llm-compressor plugin's device path.

Without a CUDA device (qobs built without CUDA, no driver, no GPU): qobs.cuda reports
the runtime's reason, calibrate_weight refuses with a clear error, QOBS_CUDA=0 is read,
and the plugin's device-path bookkeeping (fused groups, partners observed on demand,
cooperative deletion, the host fallback of mixed groups, the fallback log) runs against
a host stand-in of qobs.cuda that computes with the host observers. With a device
(tools/gpu_check.sh): calibrate_weight and the plugin on CUDA tensors give the host
observers' bytes; the device tests are skipped elsewhere, naming the reason. The same
for activations: qobs.cuda.ActivationStatistics / Importance and the plugin's activation
observers and imatrix hook, which keep their statistics on the device between batches.
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
                   "observer lsq_mse has no device path")
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
        self.batches_unsupported = set()  # observers whose activation / input batches stay on the host
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
        imp = [i for i in observer.export_statistics().items if i[0].startswith("importance_")]
        if imp:  # an imatrix observer searches with its own importance, as qobs.cuda does
            o._core.attach(int({n: t for n, t, _ in imp}["importance_sum"].shape[0]))
            o.import_statistics(qobs.Statistics(observer.name, imp, 1))
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

    def ActivationStatistics(self):  # noqa: N802  (qobs.cuda's class)
        return _HostAccumulator(self, "observe")

    def Importance(self):  # noqa: N802
        return _HostAccumulator(self, "accumulate")


class _HostAccumulator:
    """qobs.cuda.ActivationStatistics / Importance of the stand-in: a host observer of
    the same configuration continues the observer's statistics batch by batch; an error
    a batch raises is held until store_into, with the statistics before it, as the
    device defers it."""

    def __init__(self, standin, kind):
        self.standin, self.kind = standin, kind
        self.obs = None
        self.error = None

    @property
    def empty(self):
        return self.obs is None

    def unsupported(self, observer, x):
        return "no device path (stand-in)" if observer.name in self.standin.batches_unsupported else ""

    def _call(self, observer, x):
        assert not self.unsupported(observer, x)
        if self.obs is None:
            self.obs = _HostStandIn._fresh(observer)
            if self.kind == "accumulate":
                imp = {n: t for n, t, _ in observer.export_statistics().items}["importance_sum"]
                self.obs._core.attach(int(imp.shape[0]))
            self.obs.import_statistics(observer.export_statistics())
        self.standin.observed.append(f"{self.kind} {observer.name}")
        if self.error is not None:
            return
        try:
            if self.kind == "observe":
                self.obs(x.detach())
            else:
                self.obs._core.accumulate_input(x.detach())
        except ValueError as e:
            self.error = e

    observe = accumulate = _call

    def store_into(self, observer):
        if self.obs is None:
            return
        mine = self.obs.export_statistics()
        names = {n for n, _, _ in mine.items}
        kept = [i for i in observer.export_statistics().items if i[0] not in names]
        observer.import_statistics(qobs.Statistics(observer.name, kept + list(mine.items), 1))
        self.obs, error, self.error = None, self.error, None
        if error is not None:
            raise error


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


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt", ["int4_g128_asym", "nvfp4"])
@pytest.mark.parametrize("name", ["imatrix_mse", "nvfp4_expanded_imatrix"])
def test_calibrate_weight_imatrix_equals_the_host_observer(torch, name, fmt, dtype):
    dev = _device(torch)
    w = _weight(torch, 96, 256, 9, dtype)
    args = qobs.QuantizationArgs(**FORMATS[fmt])
    host = qobs.Observer.load_from_registry(name, base_name="weight", args=args)
    obs = qobs.Observer.load_from_registry(name, base_name="weight", args=args)
    for o in (host, obs):  # the same importance, as the forward-pre hook leaves it
        o._core.attach(256)
        for x in _batches(torch, (3, 256), 2, dtype):
            o._core.accumulate_input(x)
    why = qobs.cuda.device_unsupported(obs, w.to(dev))
    if "libm powf" in why:
        pytest.skip(why)
    assert why == "", why
    want = host(w).get_qparams()
    got = qobs.cuda.calibrate_weight(obs, w.to(dev))
    for k in ("scale", "zero_point", "global_scale"):
        assert _same_bytes(torch, got[k], want[k]), k
    assert obs._core.imatrix_search_path() == "importance"
    assert not obs.has_statistics


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
        "observer lsq_mse has no device path"]
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


# -- activations ------------------------------------------------------------------------------

ACT_OBSERVERS = ("memoryless_minmax", "static_minmax", "minmax")
ACT_FORMATS = {"int8_tensor": dict(num_bits=8, type="int", symmetric=True, strategy="tensor"),
               "int4_g16_asym": dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=16),
               "fp8_tensor": dict(num_bits=8, type="float", symmetric=True, strategy="tensor")}


def _batches(torch, shape, n, dtype="bfloat16", seed=40):
    """n activation batches: normal values with outliers, then signed zeros, subnormals,
    all-equal and all-zero batches."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(n):
        x = torch.randn(*shape, generator=g) * 3
        x.view(-1)[::53] *= 40
        if k % 5 == 1:
            x.view(-1)[::3] = torch.tensor([0.0, -0.0]).repeat((x.numel() + 5) // 6)[: (x.numel() + 2) // 3]
        elif k % 5 == 2:
            x *= 1e-39
        elif k % 5 == 3:
            x.fill_(-0.8125)
        elif k % 5 == 4:
            x.zero_()
        out.append(x.to(getattr(torch, dtype)))
    return out


def test_activation_accumulators_say_why_they_stay_on_the_host(torch):
    args = qobs.QuantizationArgs(**ACT_FORMATS["int8_tensor"])
    mse = qobs.Observer.load_from_registry("mse", base_name="input", args=args)
    mm = qobs.Observer.load_from_registry("minmax", base_name="input", args=args)
    x = torch.zeros(2, 32)  # only the shape, dtype and strides are read
    acts = qobs.cuda.ActivationStatistics()
    assert acts.empty
    assert acts.unsupported(mse, x) == "observer mse has no device path for activations"
    assert "int32 batch" in acts.unsupported(mm, x.to(torch.int32))
    assert "lazy negation" in acts.unsupported(mm, torch._neg_view(x))
    if not qobs.cuda.available():
        assert acts.unsupported(mm, x) == qobs.cuda.unavailable_reason()
        with pytest.raises(ValueError, match="minmax cannot take this batch on the device: " +
                           qobs.cuda.unavailable_reason()[:20]):
            acts.observe(mm, x)
    imp = qobs.cuda.Importance()
    assert imp.unsupported(mm, x) == "observer minmax collects no importance"
    im = qobs.Observer.load_from_registry("imatrix_mse", base_name="weight", args=qobs.QuantizationArgs(**INT4_SYM))
    assert "not attached" in imp.unsupported(im, x)
    im.attach(32)
    assert imp.unsupported(im, x.t()) == "a non-contiguous input"
    with pytest.raises(TypeError, match="lazy negation"):
        imp.accumulate(im, torch._neg_view(x))
    acts.store_into(mm)  # nothing observed: nothing stored, nothing waited for
    assert not mm.has_statistics


def _run_activations(ours, xs):
    for x in xs:
        ours(x)
    return ours.get_statistics(), ours.get_qparams()


@pytest.mark.parametrize("fmt", ["int8_tensor", "int4_g16_asym"])
@pytest.mark.parametrize("name", ACT_OBSERVERS)
def test_plugin_keeps_activation_statistics_on_the_device(lc, torch, monkeypatch, name, fmt):
    qlc = lc[0]
    xs = _batches(torch, (2, 5, 64), 6)
    want_st, want_qp = _run_activations(_lc_observer(lc, name, "input", ACT_FORMATS[fmt]), xs)
    dev = _HostStandIn(torch)
    monkeypatch.setattr(qlc, "_cuda", dev)
    ours = _lc_observer(lc, name, "input", ACT_FORMATS[fmt])
    for x in xs:
        ours(x)
    # every batch went to the device; the core saw none of them
    assert dev.observed == [f"observe {name}"] * len(xs)
    assert ours.has_statistics and not ours._qobs.has_statistics and not ours._dev_acts.empty
    st = ours.get_statistics()  # hands them to the core
    assert ours._dev_acts.empty and ours._qobs.has_statistics
    for k in ("min_vals", "max_vals"):
        assert _same_bytes(torch, st[k], want_st[k]), k
    ours(xs[0])  # continues from the core's statistics
    qp = ours.get_qparams()
    ref = _lc_observer(lc, name, "input", ACT_FORMATS[fmt])
    for x in xs + [xs[0]]:
        ref(x)
    want_qp = ref.get_qparams()
    for k in ("scale", "zero_point"):
        assert _same_bytes(torch, qp[k], want_qp[k]), k


def test_plugin_activation_fallback_hands_the_device_statistics_to_the_host_first(lc, torch, monkeypatch, caplog):
    qlc = lc[0]
    monkeypatch.setattr(qlc, "_warned", set())
    xs = _batches(torch, (3, 64), 5, "float32")
    ref = _lc_observer(lc, "static_minmax", "input", ACT_FORMATS["int8_tensor"])
    for x in xs:
        ref(x)
    want = ref.get_qparams()
    dev = _HostStandIn(torch)
    monkeypatch.setattr(qlc, "_cuda", dev)
    ours = _lc_observer(lc, "static_minmax", "input", ACT_FORMATS["int8_tensor"])
    with caplog.at_level(logging.INFO, logger="qobs"):
        for i, x in enumerate(xs):
            if i == 3:
                dev.batches_unsupported.add("static_minmax")  # e.g. a batch of another dtype
            ours(x)
    assert dev.observed == ["observe static_minmax"] * 3
    assert ours._dev_acts.empty
    got = ours.get_qparams()
    for k in ("scale", "zero_point"):
        assert _same_bytes(torch, got[k], want[k]), k
    assert [r.getMessage() for r in caplog.records if r.name == "qobs.llmcompressor"] == [
        "qobs_static_minmax (input): CUDA tensor calibrated on the host (copied there): no device path (stand-in)"]


def test_plugin_deferred_non_finite_batch_raises_when_the_statistics_are_read(lc, torch, monkeypatch):
    qlc = lc[0]
    xs = _batches(torch, (3, 64), 4, "float32")
    xs[2] = xs[2].clone()
    xs[2][1, 7] = float("inf")
    ref = _lc_observer(lc, "minmax", "input", ACT_FORMATS["int8_tensor"])
    ref(xs[0])
    ref(xs[1])
    with pytest.raises(ValueError, match="non-finite"):
        ref(xs[2])
    monkeypatch.setattr(qlc, "_cuda", _HostStandIn(torch))
    ours = _lc_observer(lc, "minmax", "input", ACT_FORMATS["int8_tensor"])
    for x in xs:
        ours(x)  # nothing raises before the statistics are read
    with pytest.raises(ValueError, match="non-finite"):
        ours.get_qparams()
    # the statistics before the bad batch, as the host observer keeps them
    got, want = ours.get_statistics(), ref.get_statistics()
    for k in ("min_vals", "max_vals"):
        assert _same_bytes(torch, got[k], want[k]), k


def _imatrix_run(lc, torch, xs, dev_module="cpu"):
    lin = torch.nn.Linear(64, 32, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(_weight(torch, 32, 64, 21))
    lin = lin.to(dev_module)
    obs = _lc_observer(lc, "imatrix_mse", "weight", dict(INT4_SYM, group_size=16))
    obs.attach(lin)
    with torch.no_grad():
        for x in xs:
            lin(x.to(dev_module))
    return obs, lin


def test_plugin_imatrix_hook_accumulates_on_the_device(lc, torch, monkeypatch):
    qlc = lc[0]
    xs = _batches(torch, (2, 7, 64), 4)
    ref, ref_lin = _imatrix_run(lc, torch, xs)
    want = ref(ref_lin.weight).get_qparams()
    dev = _HostStandIn(torch, unsupported={"imatrix_mse"})  # its weight stays on the host here
    monkeypatch.setattr(qlc, "_cuda", dev)
    ours, lin = _imatrix_run(lc, torch, xs)
    assert dev.observed == ["accumulate imatrix_mse"] * 4
    assert not ours._dev_importance.empty
    got = ours(lin.weight).get_qparams()  # the weight on the host: the importance reaches the core first
    assert ours._dev_importance.empty
    for k in ("scale", "zero_point"):
        assert _same_bytes(torch, got[k], want[k]), k


def test_plugin_imatrix_weight_on_the_device_searches_with_the_hook_importance(lc, torch, monkeypatch):
    qlc = lc[0]
    xs = _batches(torch, (2, 7, 64), 4)
    ref, ref_lin = _imatrix_run(lc, torch, xs)
    want = ref(ref_lin.weight).get_qparams()
    dev = _HostStandIn(torch)
    monkeypatch.setattr(qlc, "_cuda", dev)
    ours, lin = _imatrix_run(lc, torch, xs)
    got = ours(lin.weight).get_qparams()
    # the importance accumulated on the device reached the core before the weight's search
    assert dev.observed == ["accumulate imatrix_mse"] * 4 + ["imatrix_mse"]
    assert ours._dev_importance.empty
    for k in ("scale", "zero_point"):
        assert _same_bytes(torch, got[k], want[k]), k
    # attached, but no input reached the module: the plugin's error, before the device observes
    dev.observed.clear()
    idle, idle_lin = _imatrix_run(lc, torch, [])
    with pytest.raises(ValueError, match="no importance data for module"):
        idle(idle_lin.weight)
    assert dev.observed == []


def test_plugin_activations_and_imatrix_inputs_honour_qobs_cuda_0(lc, torch, monkeypatch, caplog):
    qlc = lc[0]
    monkeypatch.setattr(qlc, "_warned", set())
    monkeypatch.setattr(qobs.cuda, "available", lambda: True)  # as where a device is present
    dev = _HostStandIn(torch, unsupported={"imatrix_mse"}, host_reason=qobs.cuda.host_reason)
    monkeypatch.setattr(qlc, "_cuda", dev)
    monkeypatch.setenv("QOBS_CUDA", "0")
    xs = _batches(torch, (2, 7, 64), 3)
    with caplog.at_level(logging.INFO, logger="qobs"):
        acts = _lc_observer(lc, "minmax", "input", ACT_FORMATS["int8_tensor"])
        for x in xs:
            acts(x)
        imatrix, _ = _imatrix_run(lc, torch, xs)
    assert dev.observed == [] and acts._dev_acts.empty and acts._qobs.has_statistics
    assert int(imatrix._qobs._imatrix_count) == 3 * 14
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "qobs.llmcompressor"] == [
        (logging.INFO, "qobs_minmax (input): CUDA tensor calibrated on the host (copied there): "
                       "QOBS_CUDA=0 in the environment"),
        (logging.INFO, "qobs_imatrix_mse (weight): CUDA tensor calibrated on the host (copied there): "
                       "QOBS_CUDA=0 in the environment")]


# -- activations on a CUDA device ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("fmt", list(ACT_FORMATS))
@pytest.mark.parametrize("name", ACT_OBSERVERS)
def test_activation_statistics_equal_the_host_observer(torch, name, fmt, dtype):
    dev = _device(torch)
    args = qobs.QuantizationArgs(**ACT_FORMATS[fmt])
    host = qobs.Observer.load_from_registry(name, base_name="input", args=args)
    obs = qobs.Observer.load_from_registry(name, base_name="input", args=args)
    acts = qobs.cuda.ActivationStatistics()
    for x in _batches(torch, (3, 7, 48), 10, dtype):
        host(x)
        acts.observe(obs, x.to(dev))
    acts.store_into(obs)
    want, got = host.get_statistics(), obs.get_statistics()
    for k in ("min_vals", "max_vals"):
        assert _same_bytes(torch, torch.as_tensor(got[k]), torch.as_tensor(want[k])), k


def test_activation_statistics_defer_a_non_finite_batch(torch):
    dev = _device(torch)
    args = qobs.QuantizationArgs(**ACT_FORMATS["int8_tensor"])
    host = qobs.Observer.load_from_registry("static_minmax", base_name="input", args=args)
    obs = qobs.Observer.load_from_registry("static_minmax", base_name="input", args=args)
    xs = _batches(torch, (4, 64), 4, "bfloat16")
    xs[2] = xs[2].clone()
    xs[2][3, 5] = float("nan")
    acts = qobs.cuda.ActivationStatistics()
    for x in xs:
        acts.observe(obs, x.to(dev))
    host(xs[0])
    host(xs[1])
    with pytest.raises(ValueError, match=r"non-finite value nan at flat index 197 of shape \(4, 64\) in batch 3 of 4"):
        acts.store_into(obs)
    for k in ("min_vals", "max_vals"):
        assert _same_bytes(torch, torch.as_tensor(obs.get_statistics()[k]), torch.as_tensor(host.get_statistics()[k]))


def test_activation_statistics_follow_torchs_current_stream(torch):
    dev = _device(torch)
    args = qobs.QuantizationArgs(**ACT_FORMATS["int8_tensor"])
    obs = qobs.Observer.load_from_registry("static_minmax", base_name="input", args=args)
    src = _batches(torch, (64, 256), 1, "bfloat16")[0].to(dev)
    x = torch.zeros_like(src)
    acts = qobs.cuda.ActivationStatistics()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        # written late on the side stream: read on another stream, it would still be zeros
        torch.cuda._sleep(200_000_000)
        x.copy_(src)
        acts.observe(obs, x)
    acts.observe(obs, torch.zeros_like(src))  # the default stream, ordered after the side stream's batch
    acts.store_into(obs)
    host = qobs.Observer.load_from_registry("static_minmax", base_name="input", args=args)
    host(src.cpu())
    host(torch.zeros(64, 256, dtype=torch.bfloat16))
    for k in ("min_vals", "max_vals"):
        assert _same_bytes(torch, torch.as_tensor(obs.get_statistics()[k]), torch.as_tensor(host.get_statistics()[k]))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_importance_equals_the_host_hook(torch, dtype):
    dev = _device(torch)
    args = qobs.QuantizationArgs(**INT4_SYM)
    host = qobs.Observer.load_from_registry("imatrix_mse", base_name="weight", args=args)
    obs = qobs.Observer.load_from_registry("imatrix_mse", base_name="weight", args=args)
    host.attach(256)
    obs.attach(256)
    imp = qobs.cuda.Importance()
    for x in _batches(torch, (3, 9, 256), 6, dtype):
        host._core.accumulate_input(x)
        imp.accumulate(obs, x.to(dev))
    imp.store_into(obs)
    assert torch.equal(torch.as_tensor(obs._imatrix_sum).view(torch.int32),
                       torch.as_tensor(host._imatrix_sum).view(torch.int32))
    assert int(obs._imatrix_count) == int(host._imatrix_count) == 6 * 27


@pytest.mark.parametrize("fmt", ["int8_tensor", "int4_g16_asym"])
@pytest.mark.parametrize("name", ACT_OBSERVERS)
def test_plugin_on_cuda_activations_equal_the_host_path(lc, torch, name, fmt):
    dev = _device(torch)
    xs = _batches(torch, (2, 33, 64), 6)
    want_st, want_qp = _run_activations(_lc_observer(lc, name, "input", ACT_FORMATS[fmt]), xs)
    ours = _lc_observer(lc, name, "input", ACT_FORMATS[fmt])
    for x in xs:
        ours(x.to(dev))
    assert not ours._dev_acts.empty and not ours._qobs.has_statistics
    st, qp = ours.get_statistics(), ours.get_qparams()
    for k in ("min_vals", "max_vals"):
        assert st[k].device == dev and _same_bytes(torch, st[k], want_st[k]), k
    for k in ("scale", "zero_point"):
        assert qp[k].device == dev and _same_bytes(torch, qp[k], want_qp[k]), k


def test_plugin_on_cuda_imatrix_hook_equals_the_host_path(lc, torch):
    dev = _device(torch)
    xs = _batches(torch, (2, 7, 64), 4)
    ref, ref_lin = _imatrix_run(lc, torch, xs)
    want = ref(ref_lin.weight).get_qparams()
    ours, lin = _imatrix_run(lc, torch, xs, dev)
    assert not ours._dev_importance.empty
    got = ours(lin.weight).get_qparams()
    for k in ("scale", "zero_point"):
        assert got[k].device == dev and _same_bytes(torch, got[k], want[k]), k
