"""qobs on CUDA devices: weights in torch CUDA tensors calibrated where they are, and
activation statistics accumulated where the activations are.

    import qobs, qobs.cuda
    obs = qobs.Observer.load_from_registry("memoryless_mse", base_name="weight", args=args)
    qp = qobs.cuda.calibrate_weight(obs, layer.weight)   # torch tensors on the weight's device

``calibrate_weight`` gives the bytes ``obs(weight.cpu()).get_qparams()`` gives, in the
same dtypes and shapes, as torch tensors on the weight's device; the observer's
configuration is used, its statistics are not touched. The observers with a device path
are the data-free weight observers (memoryless_minmax, memoryless_mse,
nvfp4_expanded_mse, fouroversix) and the importance-weighted imatrix_mse and
nvfp4_expanded_imatrix (their importance is the observer's own, as its forward-pre hook
or ``Importance.store_into`` left it), on float32 / bfloat16 / float16 weights of any
strides; ``device_unsupported`` says why another call must stay on the host.

Streams: the work is enqueued on torch's current stream of the weight's device, so it
is ordered after whatever torch enqueued there before (a weight written by a torch
kernel on that stream is read after the write) and before what comes after (the
results can be used at once on that stream). Nothing waits for the device except where
the answer must reach Python: the weight's non-finite check (one small copy per
weight, which raises ValueError naming the value and its index, as on the host) and,
for tensor_group, the global scale's range check.

Activations: ``ActivationStatistics`` continues an activation observer's min_vals /
max_vals (memoryless_minmax, static_minmax, minmax) over torch CUDA batches, and
``Importance`` an imatrix observer's importance (its forward-pre hook's work), each
batch enqueued on torch's current stream with no wait and no copy; ``store_into``
waits once and hands the result to the observer, with the bytes the host observer
gives for the same batches. A batch holding NaN or Inf is found on the device and
raises (ValueError naming the value, index, shape and batch) at ``store_into``, the
statistics being those before it, as the host observer keeps them when it raises.

``import qobs.cuda`` needs no torch and no GPU: ``available()`` is then False and
``unavailable_reason()`` says why (qobs built without CUDA, no driver, no device).
``QOBS_CUDA=0`` in the environment keeps the llm-compressor plugin on the host
(``host_reason``); ``calibrate_weight`` is an explicit request and ignores it.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Sequence

from . import _qobs
from .observer import IMATRIX_OBSERVERS, _warn_imatrix_fallback

__all__ = ["available", "unavailable_reason", "device_count", "describe_device", "calibrate_weight",
           "device_unsupported", "ActivationStatistics", "Importance"]

# torch reports its default stream, CUDA's legacy default stream, as the handle 0. qobs
# reads a null handle as its own per-thread default stream, which is ordered against the
# legacy stream only implicitly; cudaStreamLegacy, ((cudaStream_t)0x1), names the legacy
# stream itself.
_CUDA_STREAM_LEGACY = 1


def available() -> bool:
    """True when qobs was built with CUDA and the CUDA runtime sees a device."""
    return _qobs.cuda_available()


def unavailable_reason() -> str:
    """Why available() is False ("" when it is True)."""
    return _qobs.cuda_unavailable_reason()


def device_count() -> int:
    return _qobs.cuda_device_count()


def describe_device(device: int) -> str:
    """"NVIDIA H200 (sm_90, 132 SMs, 141 GiB)"-style description of device `device`."""
    return _qobs.cuda_describe_device(device)


def host_reason() -> str:
    """Why the llm-compressor plugin keeps CUDA tensors on the host ("" when it may use
    the device): QOBS_CUDA=0 in the environment, or no usable device."""
    if os.environ.get("QOBS_CUDA", "") == "0":
        return "QOBS_CUDA=0 in the environment"
    if not available():
        return "no CUDA device: " + unavailable_reason()
    return ""


def _torch():
    return sys.modules.get("torch")


def is_device_tensor(t: Any) -> bool:
    """Whether `t` is a tensor in CUDA device memory (a torch CUDA tensor)."""
    return bool(getattr(t, "is_cuda", False))


def _core(observer: Any) -> Any:
    """The C++ observer of a qobs.Observer (or the C++ observer itself)."""
    core = getattr(observer, "_core", observer)
    if not isinstance(core, _qobs.Observer):
        raise TypeError(f"expected a qobs.Observer, got {type(observer).__name__}")
    return core


def _layout_reason(t: Any) -> str:
    """Why a CUDA tensor's memory cannot be read as its values ("" when it can)."""
    torch = _torch()
    if t.layout != torch.strided:
        return f"a tensor of layout {t.layout} (the device path reads strided tensors)"
    if t.is_neg():
        return "a tensor with the lazy negation bit set (call .resolve_neg())"
    return ""


def device_unsupported(observer: Any, weight: Any) -> str:
    """Why observing `weight` (a torch CUDA tensor) with `observer` cannot run on the
    device ("" when it can): no device, an observer without a device path, a dtype or
    layout the device path does not read."""
    reason = _layout_reason(weight)
    if reason:
        return reason
    return _qobs.cuda_device_unsupported(_core(observer), weight.data_ptr(), str(weight.dtype), list(weight.shape),
                                         list(weight.stride()))


def _stream(device: Any):
    """torch's current stream of `device` and its handle for qobs."""
    stream = _torch().cuda.current_stream(device)
    return stream, stream.cuda_stream or _CUDA_STREAM_LEGACY


class WeightStatistics:
    """An observer's statistics of one weight on its device (a qobs DeviceStatistics),
    with the torch stream they were made on: their memory is released on that stream
    when this object goes, so a stream that reads them must be waited for first
    (qparams_of does that)."""

    __slots__ = ("stats", "stream", "device")

    def __init__(self, stats: Any, stream: Any, device: Any):
        self.stats = stats
        self.stream = stream
        self.device = device


def observe_weight(observer: Any, weight: Any) -> WeightStatistics:
    """Phase 1 of `observer` on a torch CUDA tensor, on torch's current stream of its
    device. ValueError for a non-finite weight or a call without a device path (as
    device_unsupported names it); the observer's own statistics are not changed."""
    torch = _torch()
    reason = _layout_reason(weight)
    if reason:
        raise TypeError(f"qobs.cuda: cannot read the weight: {reason}")
    stream, handle = _stream(weight.device)
    # Set torch's current device too: qobs makes the weight's device current in its
    # own CUDA runtime, and this restores torch's choice afterwards.
    with torch.cuda.device(weight.device):
        stats = _qobs.cuda_observe_weight(_core(observer), weight.data_ptr(), str(weight.dtype), list(weight.shape),
                                          list(weight.stride()), handle)
    # The kernels reading the weight are enqueued on `stream`, maybe still to run. The
    # caller's reference kept the weight alive while they were enqueued; once it is
    # dropped, torch's caching allocator may hand the memory to a new tensor, and that
    # tensor's first writes are ordered after our reads only on the stream the memory
    # was allocated on. record_stream, what torch asks of any use on another stream,
    # holds the block back until the work enqueued on `stream` so far is done (on the
    # allocation stream itself it is a no-op).
    weight.record_stream(stream)
    core = _core(observer)
    if core.name in IMATRIX_OBSERVERS:
        _warn_imatrix_fallback(core)  # Q8, as the host observer warns
    return WeightStatistics(stats, stream, weight.device)


def _current_stream_after(stats: Sequence[WeightStatistics], device: Any):
    """torch's current stream of `device`, made to wait (on the device, not the host)
    for the streams the statistics were made on."""
    stream, handle = _stream(device)
    for s in stats:
        if s.stream != stream:
            stream.wait_stream(s.stream)
    return stream, handle


def _release_after(stats: Sequence[WeightStatistics], stream: Any) -> None:
    """The statistics' memory is released on the stream that made them: that stream
    waits for `stream`'s reads of them first."""
    for s in stats:
        if s.stream != stream:
            s.stream.wait_stream(stream)


def _check_fused(stats: WeightStatistics, fused: Sequence[WeightStatistics]) -> List[Any]:
    if not fused:
        return []
    if not any(f is stats for f in fused):
        raise ValueError("qobs.cuda: the fused statistics must include the observer's own (R6.10)")
    for f in fused:
        if f.device != stats.device:
            raise ValueError(f"qobs.cuda: fused members on different devices ({f.device} and {stats.device}, R6.10)")
    return [f.stats for f in fused]


def qparams_of(observer: Any, stats: WeightStatistics,
               fused: Sequence[WeightStatistics] = ()) -> Dict[str, Optional[Any]]:
    """Phase 2 of `observer` on its device statistics: {"scale", "zero_point",
    "global_scale"} as torch tensors on the statistics' device, allocated on and
    computed on torch's current stream there. fused: every member's statistics, this
    one first, when the observer shares its global scale (R6.10); empty otherwise."""
    torch = _torch()
    core = _core(observer)
    members = list(fused) if fused else [stats]
    fused_stats = _check_fused(stats, fused)
    scale_shape, scale_dtype, zp_shape, zp_dtype, has_global = _qobs.cuda_qparams_layout(core, stats.stats)
    with torch.cuda.device(stats.device):
        stream, handle = _current_stream_after(members, stats.device)
        scale = torch.empty(scale_shape, dtype=getattr(torch, scale_dtype), device=stats.device)
        zero_point = torch.empty(zp_shape, dtype=getattr(torch, zp_dtype), device=stats.device)
        global_scale = torch.empty((1,), dtype=torch.float32, device=stats.device) if has_global else None
        _qobs.cuda_qparams_from_statistics(core, stats.stats, fused_stats, scale.data_ptr(), zero_point.data_ptr(),
                                           global_scale.data_ptr() if has_global else 0, handle)
        _release_after(members, stream)
    return {"scale": scale, "zero_point": zero_point, "global_scale": global_scale}


def global_scale_of(observer: Any, stats: WeightStatistics, fused: Sequence[WeightStatistics] = ()) -> Optional[Any]:
    """R6.1.5 on the device: the (fused) f32 global scale of a tensor_group observer as a
    torch tensor of shape (1,) on the statistics' device; None for other strategies."""
    torch = _torch()
    core = _core(observer)
    if not _qobs.cuda_qparams_layout(core, stats.stats)[4]:
        return None
    members = list(fused) if fused else [stats]
    fused_stats = _check_fused(stats, fused)
    with torch.cuda.device(stats.device):
        stream, handle = _current_stream_after(members, stats.device)
        out = torch.empty((1,), dtype=torch.float32, device=stats.device)
        _qobs.cuda_global_scale_from_statistics(core, stats.stats, fused_stats, out.data_ptr(), handle)
        _release_after(members, stream)
    return out


def statistics_of(stats: WeightStatistics) -> Dict[str, Any]:
    """{"min_vals", "max_vals"}: copies of the statistics as torch tensors on their
    device (enqueued on the current stream)."""
    torch = _torch()
    with torch.cuda.device(stats.device):
        stream, handle = _current_stream_after([stats], stats.device)
        dtype = getattr(torch, stats.stats.dtype)
        mn = torch.empty(stats.stats.shape, dtype=dtype, device=stats.device)
        mx = torch.empty(stats.stats.shape, dtype=dtype, device=stats.device)
        stats.stats.copy_to(mn.data_ptr(), mx.data_ptr(), handle)
        _release_after([stats], stream)
    return {"min_vals": mn, "max_vals": mx}


def _check_cuda_tensor(t: Any, what: str) -> None:
    torch = _torch()
    if torch is None or not isinstance(t, torch.Tensor):
        raise TypeError(f"qobs.cuda.calibrate_weight: {what} must be a torch tensor, got {type(t).__name__}")
    if not is_device_tensor(t):
        raise ValueError(f"qobs.cuda.calibrate_weight: {what} is on device '{t.device}', not a CUDA device "
                         "(host tensors are calibrated by the observer itself: observer(weight).get_qparams())")


def calibrate_weight(observer: Any, weight: Any, fused: Optional[Sequence[Any]] = None) -> Dict[str, Optional[Any]]:
    """The qparams of `weight` (a torch CUDA tensor of float32, bfloat16 or float16, any
    strides) under `observer`'s configuration: {"scale", "zero_point", "global_scale"}
    as torch tensors on the weight's device, the bytes and dtypes the observer gives on
    the host. fused: the other members of the weight's fused group (R6.10: q/k/v,
    gate/up sharing one NVFP4 global scale), each a weight (observed with `observer`'s
    configuration) or an (observer, weight) pair; used by tensor_group observers only.

    Errors: TypeError for a non-tensor or an observer that is not a qobs.Observer,
    ValueError for a tensor not on a CUDA device, a call without a device path (naming
    why) or a non-finite weight, OSError when qobs has no CUDA device."""
    _check_cuda_tensor(weight, "weight")
    members = []
    for item in fused or ():
        obs, w = item if isinstance(item, tuple) else (observer, item)
        _check_cuda_tensor(w, "fused weight")
        members.append((obs, w))
    if not available():
        raise OSError("qobs.cuda.calibrate_weight: no CUDA device: " + unavailable_reason())
    own = observe_weight(observer, weight)
    if not members or not _qobs.cuda_qparams_layout(_core(observer), own.stats)[4]:
        return qparams_of(observer, own)
    return qparams_of(observer, own, [own] + [observe_weight(o, w) for o, w in members])


def _view_args(t: Any) -> tuple:
    return t.data_ptr(), str(t.dtype), list(t.shape), list(t.stride())


class _Accumulator:
    """A device accumulation over batches (the C++ object `impl`) and the torch stream
    its work is ordered on: each batch runs on torch's current stream of the batch's
    device, made to wait (on the device) for the stream of the batch before when that
    was another one, so that the calls stay ordered as qobs/cuda.h requires."""

    __slots__ = ("_impl", "stream", "device")

    def __init__(self, impl: Any):
        self._impl = impl
        self.stream = None
        self.device = None

    @property
    def empty(self) -> bool:
        return self._impl.empty

    def unsupported(self, observer: Any, x: Any) -> str:
        """Why this batch (a torch CUDA tensor) cannot continue the accumulation on the
        device ("" when it can)."""
        return _layout_reason(x) or self._impl.unsupported(_core(observer), *_view_args(x))

    def _enqueue(self, call: Any, observer: Any, x: Any) -> None:
        torch = _torch()
        reason = _layout_reason(x)
        if reason:
            raise TypeError(f"qobs.cuda: cannot read the batch: {reason}")
        core = _core(observer)
        why = self._impl.unsupported(core, *_view_args(x))
        if why:
            raise ValueError(f"qobs.cuda: {core.name} cannot take this batch on the device: {why}")
        stream, handle = _stream(x.device)
        if self.stream is not None and self.stream != stream:
            stream.wait_stream(self.stream)
        with torch.cuda.device(x.device):
            call(core, *_view_args(x), handle)
        # the batch's memory is read on `stream` after the caller drops it: see observe_weight
        x.record_stream(stream)
        self.stream, self.device = stream, x.device

    def store_into(self, observer: Any) -> None:
        """Waits for the device and replaces the observer's statistics by these (nothing
        when no batch was accumulated); this object is empty afterwards."""
        if self._impl.empty:
            return
        torch = _torch()
        stream, device = self.stream, self.device
        self.stream = self.device = None
        with torch.cuda.device(device):
            self._impl.store_into(_core(observer), stream.cuda_stream or _CUDA_STREAM_LEGACY)


class ActivationStatistics(_Accumulator):
    """An activation observer's statistics over torch CUDA batches, kept on the device:
    ``observe(observer, x)`` per batch (nothing waits), ``store_into(observer)`` once.
    The first batch continues the observer's own statistics; until store_into, they
    must not change. ``unsupported`` says why a batch must stay on the host."""

    __slots__ = ()

    def __init__(self):
        super().__init__(_qobs.CudaActivationStatistics())

    def observe(self, observer: Any, x: Any) -> None:
        """One batch (R6.1.2): ValueError naming why when unsupported, a shape error for
        statistics of another shape than the running ones (as on the host)."""
        self._enqueue(self._impl.observe, observer, x)


class Importance(_Accumulator):
    """An imatrix observer's importance (R6.8.3: its forward-pre hook's sums of x^2 per
    input feature and its row count) over torch CUDA inputs, kept on the device:
    ``accumulate(observer, x)`` per input, ``store_into(observer)`` once."""

    __slots__ = ()

    def __init__(self):
        super().__init__(_qobs.CudaImportance())

    def accumulate(self, observer: Any, x: Any) -> None:
        """One input batch: ValueError naming why when unsupported or when its last
        dimension is not the observer's in_features."""
        self._enqueue(self._impl.accumulate, observer, x)
