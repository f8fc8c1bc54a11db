"""qobs-backed observers in llm-compressor's own observer registry.

``import qobs.llmcompressor`` registers, under names of their own, observers whose
statistics and qparams are computed by the qobs C++ core:

    qobs_memoryless_minmax  qobs_static_minmax  qobs_minmax  qobs_memoryless_mse
    qobs_mse  qobs_nvfp4_expanded_mse  qobs_fouroversix  qobs_imatrix_mse
    qobs_nvfp4_expanded_imatrix
    qobs_lsq_mse  qobs_imatrix_lsq   (qobs's own, docs/LSQ.md)

so that ``QuantizationArgs(observer="qobs_mse")`` in any llm-compressor recipe uses
them with no other change. They are subclasses of llm-compressor's ``Observer`` and
keep its interface (forward returns the observer, get_qparams, has_statistics,
attach/detach, fusion through its FusionHandler, DDP sync). This module is glue
between llm-compressor's object model and qobs.Observer; it does no arithmetic.

Calibration data: llm-compressor gives a run data only when a modifier says it needs
them, and it infers that for weight observers by their exact names ``imatrix_mse`` and
``nvfp4_expanded_imatrix`` (docs/RULES.md R6.12.3); it offers an observer no way to ask.
So a recipe with ``qobs_imatrix_mse`` or ``qobs_nvfp4_expanded_imatrix`` must pass
``QuantizationModifier(..., requires_calibration_data=True)`` and a dataset to
``oneshot``. Without data these observers raise ValueError naming the module instead of
calibrating without importance.

CUDA: a weight observer given a CUDA tensor whose call the device supports
(qobs.cuda.device_unsupported) keeps its statistics on the device and computes its
qparams there, on torch's current stream, with the bytes of the host path; a fused group
(R6.10) does so only when every member can, else the whole group stays on the host. The
activation observers qobs_memoryless_minmax, qobs_static_minmax and qobs_minmax, and the
imatrix observers' forward-pre hook, accumulate CUDA batches on the device
(qobs.cuda.ActivationStatistics, qobs.cuda.Importance) with no wait per batch; the
first call that needs the statistics (get_qparams, get_statistics, ...) waits once and
hands them to the core. Any other CUDA tensor is copied to the host as before, and the
first such call per observer and reason logs why on the "qobs.llmcompressor" logger.
``QOBS_CUDA=0`` in the environment keeps everything on the host (docs/PYTHON.md,
"CUDA").

Requires llmcompressor (and so torch): ``pip install qobs[llmcompressor]``; importing
it without them raises ImportError saying so.
"""

from __future__ import annotations

import logging
import weakref
from contextlib import contextmanager
from typing import Any, Dict, List, Optional, Set

try:
    import torch
    from llmcompressor.modifiers.utils.hooks import HooksMixin
    from llmcompressor.observers import Observer as _LcObserver
    from torch import distributed as dist
except ImportError as e:
    # The bare "No module named 'torch'" does not say that qobs itself works without
    # torch and that only this integration needs it.
    raise ImportError(
        f"qobs.llmcompressor needs llm-compressor and torch ({e}); install them with "
        "`pip install qobs[llmcompressor]`. The rest of qobs works without them."
    ) from e

from . import _qobs
from . import cuda as _cuda
from .args import as_core_args
from .observer import IMATRIX_OBSERVERS, accumulate_hook_input, hook_input
from .observer import Observer as _QObserver
from .observer import Statistics

__all__ = ["QobsObserver", "QOBS_OBSERVERS"]

# llm-compressor registry name -> qobs core observer name
QOBS_OBSERVERS: Dict[str, str] = {
    "qobs_memoryless_minmax": "memoryless_minmax",
    "qobs_static_minmax": "static_minmax",
    "qobs_minmax": "minmax",
    "qobs_memoryless_mse": "memoryless_mse",
    "qobs_mse": "mse",
    "qobs_nvfp4_expanded_mse": "nvfp4_expanded_mse",
    "qobs_fouroversix": "fouroversix",
    "qobs_imatrix_mse": "imatrix_mse",
    "qobs_nvfp4_expanded_imatrix": "nvfp4_expanded_imatrix",
    # qobs's own least-squares observers (docs/LSQ.md), not in the reference
    "qobs_lsq_mse": "lsq_mse",
    "qobs_imatrix_lsq": "imatrix_lsq",
}

_LC_NAME = {core: lc for lc, core in QOBS_OBSERVERS.items()}

_REDUCE = {"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "sum": dist.ReduceOp.SUM}

_logger = logging.getLogger(__name__)
# llm-compressor logs its calibration warnings once per message (loguru's log_once).
_warned: Set[str] = set()


def _warn_once(message: str, level: int = logging.WARNING) -> None:
    if message not in _warned:
        _warned.add(message)
        _logger.log(level, message)


class QobsObserver(_LcObserver):
    """Base of the registered qobs observers; `_qobs_name` selects the core observer."""

    _qobs_name: str = ""

    def __init__(self, base_name: str, args: Any, **observer_kwargs: Any):
        # The base merges observer_kwargs into args.observer_kwargs, as every
        # llm-compressor observer does (Q25); the core then reads them from the args.
        super().__init__(base_name=base_name, args=args, **observer_kwargs)
        # R6.9.1: llm-compressor replaces static_minmax/minmax/mse by their memoryless
        # variants for weights, comparing exact names; the qobs names get the same rule.
        core_name = _qobs.calibration_observer_name(base_name, self._qobs_name)
        if core_name != self._qobs_name:
            # The reference's warning for its own names, with the registry names the
            # user wrote (llm-compressor's initialize_observer).
            _warn_once(
                "Overriding weight observer for lower memory usage "
                f"({_LC_NAME[self._qobs_name]} -> {_LC_NAME[core_name]})"
            )
        self._qobs = _QObserver.load_from_registry(core_name, base_name=base_name, args=as_core_args(self.args))
        self._device: Optional[torch.device] = None
        self._imatrix_hook = None
        self._imatrix_module = None  # weak reference to the module attach() hooked
        self._fused_with: tuple = ()
        # A weight's statistics on its CUDA device (qobs.cuda.WeightStatistics), held
        # instead of the core's; and their cooperative-deletion flag (R6.10.4), kept in
        # step with the core's by calling both on every deletion.
        self._dev_stats: Optional[_cuda.WeightStatistics] = None
        self._dev_done = False
        # An activation observer's statistics and an imatrix observer's importance
        # accumulated on the device (created at their first CUDA batch), handed to the
        # core by store_device_statistics before anything reads the core's.
        self._dev_acts: Optional[_cuda.ActivationStatistics] = None
        self._dev_importance: Optional[_cuda.Importance] = None

    # -- statistics --------------------------------------------------------------
    @property
    def has_statistics(self) -> bool:
        if self._dev_acts is not None and not self._dev_acts.empty:
            return True
        return self._dev_stats is not None or self._qobs.has_statistics

    def store_device_statistics(self) -> None:
        """Hands the activation statistics and importance accumulated on the device to
        the core (waiting for the device once; nothing when there are none): every call
        that reads the core's statistics runs this first. Raises ValueError for a
        non-finite batch observed on the device, as the host path raises when it
        observes it, the statistics being those before that batch."""
        stored = False
        try:
            if self._dev_importance is not None and not self._dev_importance.empty:
                stored = True
                self._dev_importance.store_into(self._qobs)
            if self._dev_acts is not None and not self._dev_acts.empty:
                stored = True
                self._dev_acts.store_into(self._qobs)
        finally:
            if stored:
                self._qobs._kind = "torch"  # the core's results come back as torch tensors, as after a torch batch

    def update_statistics_from_observed(self, observed: torch.Tensor) -> None:
        # llm-compressor's own forward flattens and calls this; the plugin's forward hands
        # the unflattened value to the core instead. A direct call with a value flattened
        # already, (num_observations, *qparam_shape, group_size), updates the same
        # statistics (R3.1). The device path takes unflattened weights only: this runs
        # on the host, replacing the statistics as it does there.
        if _cuda.is_device_tensor(observed):
            self._note_host("update_statistics_from_observed takes its flattened value on the host")
        self._dev_stats = None
        self._feed(observed, self._qobs.update_statistics_from_observed)

    def forward(self, observed: torch.Tensor) -> "QobsObserver":
        if self._qobs.is_weight_obs:
            if self._dev_stats is not None:  # R6.1.2-2, Q27
                return self
            if self._observe_on_device(observed):
                return self
        elif self._observe_activation_on_device(observed):
            return self
        self._feed(observed, self._qobs)
        return self

    def _feed(self, observed: torch.Tensor, update) -> None:
        # Runs once per calibration batch per Linear: no autograd context (the core
        # reads the tensor's memory, nothing is recorded), no copy of a CPU tensor and
        # the fusion context only for fused observers keep the call within a few
        # microseconds of the core's own time.
        self.store_device_statistics()
        self._device = observed.device
        if not observed.is_cpu:
            observed = observed.detach().cpu()
        if self.fusion_handler.is_fused:
            with self._fusion_bound() as members:
                _require_importance(members)
                update(observed)
        else:
            _require_importance([self])
            update(observed)

    def get_statistics(self) -> Dict[str, torch.Tensor]:
        if self._dev_stats is not None:
            return _cuda.statistics_of(self._dev_stats)
        self.store_device_statistics()
        return {k: v.to(self._device) if self._device else v for k, v in self._qobs.get_statistics().items()}

    def delete_statistics(self, check_fused: bool = True) -> None:
        self._dev_acts = None  # deleted before anything read them: no wait
        self.store_device_statistics()  # the importance: the core decides what deletion keeps of it
        self._qobs.delete_statistics(check_fused)
        self._delete_device_statistics(check_fused)

    @torch.no_grad()
    def get_global_scale(self) -> Optional[torch.Tensor]:
        if self._dev_stats is not None:
            fused = self._device_fused_statistics()
            if fused is not None:
                return _cuda.global_scale_of(self._qobs, self._dev_stats, fused)
        self.store_device_statistics()
        with self._fusion_bound() as members:
            _require_importance(members)
            g = self._qobs.get_global_scale()
        return self._on_device(g)

    @torch.no_grad()
    def get_qparams(self) -> Dict[str, Optional[torch.Tensor]]:
        if self._dev_stats is not None:
            fused = self._device_fused_statistics()
            if fused is not None:
                qp = _cuda.qparams_of(self._qobs, self._dev_stats, fused)
                self.delete_statistics()  # R6.1.4-4, cooperative (R6.10.4)
                return qp
        self.store_device_statistics()
        with self._fusion_bound() as members:
            _require_importance(members)
            qp = self._qobs.get_qparams()  # deletes the core's statistics cooperatively
        self._delete_device_statistics(True)
        return {k: self._on_device(v) for k, v in qp.items()}

    def _on_device(self, t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if t is None or self._device is None or self._device.type == "cpu":
            return t
        return t.to(self._device)

    # -- the device path (qobs.cuda) ------------------------------------------------
    def _note_host(self, why: str) -> None:
        """Logs, once per observer and reason, that a CUDA tensor is calibrated on the
        host and why; QOBS_CUDA=0 is the user's choice and logs at INFO."""
        level = logging.INFO if why.startswith("QOBS_CUDA=0") else logging.WARNING
        name = _LC_NAME.get(self._qobs.name, "qobs_" + self._qobs.name)
        _warn_once(f"{name} ({self.base_name}): CUDA tensor calibrated on the host (copied there): {why}", level)

    def _observe_on_device(self, observed: torch.Tensor) -> bool:
        """Phase 1 of a weight on its CUDA device when this observer (and every member
        of its fused group) can; False when the host path must run."""
        # R6.1.2-1 and -2 on the host: the core's (a weight that has statistics there
        # keeps them, and its fused group stays on the host)
        if not _cuda.is_device_tensor(observed) or observed.numel() == 0 or self._qobs.has_statistics:
            return False
        why = _cuda.host_reason() or _cuda.device_unsupported(self._qobs, observed)
        pending: list = []
        if not why and self.fusion_handler.is_fused:
            _, pending, why = self._device_group(observed.device)
        if why:
            self._note_host(why)
            return False
        self._device = observed.device
        # the importance accumulated on the device reaches the core, whose search reads
        # it, and an attached module that no input reached raises, as on the host (_feed)
        _require_importance([self] + [o for o, _ in pending])
        self._dev_stats = _cuda.observe_weight(self._qobs, observed)
        # R6.1.2-5: the fused partners lacking statistics observe their weights now
        self._observe_partners(pending)
        return True

    def _observe_activation_on_device(self, observed: torch.Tensor) -> bool:
        """One activation batch into the statistics kept on its CUDA device, when the
        observer and the batch allow it; False when the host path must run (the
        statistics accumulated so far go to the core first, in _feed)."""
        if not _cuda.is_device_tensor(observed) or observed.numel() == 0:
            return False
        if self._dev_acts is None:
            self._dev_acts = _cuda.ActivationStatistics()
        why = _cuda.host_reason() or self._dev_acts.unsupported(self._qobs, observed)
        if why:
            self._note_host(why)
            return False
        self._device = observed.device
        self._dev_acts.observe(self._qobs, observed)
        return True

    def _accumulate_importance(self, args: Any) -> None:
        """The imatrix forward-pre hook's input on its CUDA device when it can stay
        there, else on the host (accumulate_hook_input), after the importance the
        device holds has gone to the core."""
        x = hook_input(args)
        if _cuda.is_device_tensor(x) and x.dim() != 1:
            if self._dev_importance is None:
                self._dev_importance = _cuda.Importance()
            why = _cuda.host_reason()
            if not why:
                why = self._dev_importance.unsupported(self._qobs, x)
                if not why:
                    self._dev_importance.accumulate(self._qobs, x.detach())
                    return
                why = "imatrix input: " + why
            self._note_host(why)
        self.store_device_statistics()
        accumulate_hook_input(self._qobs._core, args)

    def _device_group(self, device: torch.device):
        """This observer's fused group for the device path: (observers, the partners
        that must observe their module weight first with it, why not ("" when all
        can))."""
        observers, handlers = self._group_observers()
        pending = []
        for o, h in zip(observers, handlers):
            if o is self:
                continue
            if o._dev_stats is not None:
                if o._dev_stats.device != device:
                    return observers, [], "fused members on different devices"
                continue
            if o._qobs.has_statistics:
                return observers, [], "a fused partner holds host statistics"
            mod = h.module
            weight = getattr(mod, "weight", None) if mod is not None else None
            if weight is None:
                return observers, [], "a fused partner has no module weight"
            if weight.device != device:
                return observers, [], f"a fused partner's weight is on {weight.device.type}"
            why = _cuda.device_unsupported(o._qobs, weight)
            if why:
                return observers, [], "a fused partner: " + why
            pending.append((o, weight))
        return observers, pending, ""

    def _observe_partners(self, pending) -> None:
        _require_importance([o for o, _ in pending])
        for o, weight in pending:
            o._device = weight.device
            o._dev_stats = _cuda.observe_weight(o._qobs, weight)

    def _device_fused_statistics(self) -> Optional[list]:
        """The device statistics of every member of this observer's fused group, this
        one first (partners without statistics observe their weight first, R6.10.3);
        [] when not fused; None when a member cannot take the device path (the group
        then runs on the host)."""
        if not self.fusion_handler.is_fused:
            return []
        observers, pending, why = self._device_group(self._dev_stats.device)
        if why:
            self._note_host(why)
            return None
        self._observe_partners(pending)
        return [o._dev_stats for o in observers]

    def _statistics_to_host(self) -> None:
        """Device statistics handed to the core (the same values the core would have
        made), for a call that runs on the host."""
        if self._dev_stats is None:
            return
        items = [(k, v.cpu(), "min" if k == "min_vals" else "max")
                 for k, v in _cuda.statistics_of(self._dev_stats).items()]
        self._qobs.import_statistics(Statistics(self._qobs.name, items, 1))
        self._dev_stats = None

    def _delete_device_statistics(self, check_fused: bool) -> None:
        """R6.10.4 for the device statistics, step for step with the core's deletion
        (FusionHandler.maybe_delete_statistics)."""
        handler = self.fusion_handler
        if not check_fused or not handler.is_fused:
            self._dev_stats = None
            self._dev_done = False
            return
        self._dev_done = True
        partners = [h._observer for h in handler._group]
        if all(getattr(p, "_dev_done", False) for p in partners):
            for o in partners + [self]:
                if isinstance(o, QobsObserver):
                    o._dev_stats = None
                    o._dev_done = False

    # -- fusion --------------------------------------------------------------------
    def _group_observers(self):
        """The observers of this observer's fusion group, this one first, with their
        FusionHandlers; the group is mirrored in the core (its shared global scale and
        cooperative deletion)."""
        handler = self.fusion_handler
        # FusionHandler keeps its partners in _group (set by FusionHandler.fuse).
        members = [handler] + list(handler._group)
        observers = [h._observer for h in members]
        if not all(isinstance(o, QobsObserver) for o in observers):
            raise AssertionError(
                "qobs observers can only be fused with qobs observers; "
                f"group has {[type(o).__name__ for o in observers]}"
            )
        key = tuple(id(o) for o in observers)
        if self._fused_with != key:
            _qobs.fuse_observers([o._qobs._core for o in observers])
            for o in observers:
                o._fused_with = tuple(id(p) for p in [o] + [q for q in observers if q is not o])
        return observers, members

    @contextmanager
    def _fusion_bound(self):
        """Mirror llm-compressor's fusion group (FusionHandler.fuse) in the core and
        bind each member's current module weight for the duration of one call, so
        that the core can observe a partner that has no statistics yet (R6.10.3).
        Weights are re-read per call because offloading may move them. Statistics a
        member holds on the device move to the core first: the host path sees the
        whole group."""
        handler = self.fusion_handler
        if not handler.is_fused:
            yield [self]
            return
        observers, members = self._group_observers()
        for o in observers:
            o._statistics_to_host()
        bound = []
        try:
            for o, h in zip(observers, members):
                mod = h.module
                if mod is not None and getattr(mod, "weight", None) is not None:
                    o._qobs.bind_weight(mod.weight.detach().cpu())
                    bound.append(o)
            yield observers
        finally:
            for o in bound:
                o._qobs.unbind_weight()

    # -- module hooks (imatrix) ---------------------------------------------------
    def attach(self, module: torch.nn.Module) -> None:
        """R6.8.3: importance E[x^2] per input feature through a forward-pre hook."""
        if self._qobs_name not in IMATRIX_OBSERVERS:
            return
        self.detach(module)
        if not hasattr(module, "in_features"):
            return
        self._qobs._core.attach(int(module.in_features))
        self._imatrix_module = weakref.ref(module)

        def _hook(mod, args):
            # Respect llm-compressor's global hook switch like the built-in imatrix hook.
            if HooksMixin._HOOKS_DISABLED and self._imatrix_hook not in HooksMixin._HOOKS_KEEP_ENABLED:
                return
            self._accumulate_importance(args)

        self._imatrix_hook = module.register_forward_pre_hook(_hook)

    def detach(self, module: torch.nn.Module) -> None:
        if self._imatrix_hook is not None:
            self._imatrix_hook.remove()
            self._imatrix_hook = None
            self.store_device_statistics()
            self._qobs._core.detach()

    # -- DDP -----------------------------------------------------------------------
    def sync_activation_stats(self) -> List[Any]:
        """All-reduce the statistics of the core's sync table (R6.11.1) and import the
        result. The reduction completes before returning, so no handles are pending."""
        self.store_device_statistics()
        table = self._qobs.sync_table()
        if not table or not (dist.is_available() and dist.is_initialized()) or not self._qobs.has_statistics:
            return []
        exported = self._qobs.export_statistics()
        ops = dict(table)
        world = dist.get_world_size()
        items = []
        for name, tensor, reduce in exported.items:
            t = tensor.torch()
            if name in ops:
                op = ops[name]
                dev = self._device if self._device is not None else t.device
                work = t.to(dev).clone()
                if op == "avg":
                    # Sum then divide once: AVG is NCCL-only, SUM works on every backend.
                    dist.all_reduce(work, op=dist.ReduceOp.SUM)
                    work = work / world
                else:
                    dist.all_reduce(work, op=_REDUCE[op])
                t = work.to(dtype=t.dtype, device="cpu")
                reduce = op
            items.append((name, t, reduce))
        self._qobs.import_statistics(Statistics(exported.observer, items, exported.contributions))
        return []


def _module_name(module: torch.nn.Module) -> str:
    """The module's name in the model being calibrated, else its class name."""
    try:
        from llmcompressor.core import active_session

        model = active_session().state.model
        for name, m in model.named_modules() if model is not None else ():
            if m is module:
                return name
    except Exception:  # noqa: BLE001  (naming the module must never hide the real error)
        pass
    return type(module).__name__


def _require_importance(observers) -> None:
    """R6.12.3 / D15: an imatrix observer about to observe its weight (itself or as a
    fused partner) after attach without any input is a data-free run. The core raises
    too; this names the module in llm-compressor's terms and says how to give data."""
    for o in observers:
        o.store_device_statistics()
        mod = o._imatrix_module() if o._imatrix_module is not None else None
        if mod is None or o._qobs.has_statistics:
            continue
        count = getattr(o._qobs, "importance_count", None)
        if count is not None and int(count) == 0:
            raise ValueError(
                f"qobs_{o._qobs_name}: no importance data for module '{_module_name(mod)}': the observer was attached "
                "but no input reached the module, so its weight would be calibrated without importance. "
                "llm-compressor chose its data-free pipeline because it infers calibration data only for its own "
                "observer names (imatrix_mse, nvfp4_expanded_imatrix): pass "
                "QuantizationModifier(..., requires_calibration_data=True) and a dataset to oneshot "
                "(docs/RULES.md R6.12.3)"
            )


def _register() -> None:
    registered = set(_LcObserver.registered_names())
    for lc_name, core_name in QOBS_OBSERVERS.items():
        cls = type(
            "Qobs" + "".join(p.capitalize() for p in core_name.split("_")) + "Observer",
            (QobsObserver,),
            {"_qobs_name": core_name, "__doc__": f"llm-compressor observer backed by qobs' {core_name}."},
        )
        globals()[cls.__name__] = cls
        __all__.append(cls.__name__)
        # Registry names are normalized (lower case, '-' for '_'); re-importing this
        # module (e.g. importlib.reload) must not register twice.
        if lc_name.replace("_", "-") not in registered:
            _LcObserver.register(name=lc_name)(cls)


_register()
