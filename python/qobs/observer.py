"""Observers (RULES section 6) with llm-compressor's Python interface.

``Observer.load_from_registry(name, base_name=..., args=..., **observer_kwargs)``
creates a C++ observer; calling it on a tensor accumulates statistics and returns the
observer; ``get_qparams()`` returns {"scale", "zero_point", "global_scale"} and
consumes the statistics. Results come back as the kind of array last observed
(torch or numpy).

Differences from the reference that a caller can see, all deliberate:
- ``args`` is a copy with the observer kwargs merged (the reference mutates the
  caller's args object, Q25).
- imatrix statistics are named importance_sum / importance_count in the core; the
  reference's attribute names ``_imatrix_sum`` / ``_imatrix_count`` are accepted as
  aliases.
- Observed tensors must be finite (the core raises ValueError "non-finite").
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Dict, Iterable, List, Optional, Sequence

from . import _qobs
from ._tensors import is_torch, kind_of, to_kind
from .args import QuantizationArgs, as_core_args

__all__ = [
    "Observer",
    "ObserverOptions",
    "Statistics",
    "MemorylessMinMaxObserver",
    "StaticMinMaxObserver",
    "MinMaxObserver",
    "MemorylessMSEObserver",
    "MovingAverageMSEObserver",
    "NVFP4ExpandedMSEObserver",
    "IMatrixMSEObserver",
    "NVFP4ExpandedIMatrixObserver",
    "IMATRIX_OBSERVERS",
    "LsqMSEObserver",
    "IMatrixLsqObserver",
    "fuse_observers",
    "reduce_statistics",
    "registered_observers",
    "FUSED_LAYER_NAMES",
    "ACTIVATION_OBS",
]

ObserverOptions = _qobs.ObserverOptions
Statistics = _qobs.Statistics

ACTIVATION_OBS = ("input", "output", "q", "k", "v")
FUSED_LAYER_NAMES = [tuple(g) for g in _qobs.fused_layer_names()]

# reference attribute name -> core statistic name
_STAT_ALIASES = {"_imatrix_sum": "importance_sum", "_imatrix_count": "importance_count"}
_STAT_NAMES_REF = {v: k for k, v in _STAT_ALIASES.items()}

# Core names of the observers that collect input importance through attach (R6.8, R6.12).
IMATRIX_OBSERVERS = ("imatrix_mse", "nvfp4_expanded_imatrix", "imatrix_lsq")


_logger = logging.getLogger(__name__)
# The reference logs its imatrix fallback warnings once per message (loguru's log_once).
_warned: set = set()


def _warn_imatrix_fallback(core: Any) -> None:
    """Q8: an importance-weighted observer that could not use its importance searches
    unweighted; the reference says so in a warning, in these words."""
    path = core.imatrix_search_path()
    if path.startswith("uniform fallback: "):
        message = f"imatrix_mse: {path[len('uniform fallback: '):]}. Falling back to uniform MSE."
        if message not in _warned:
            _warned.add(message)
            _logger.warning(message)



def hook_input(args: Any) -> Any:
    """The tensor an imatrix forward pre-hook reads of the module's positional
    arguments: the first one (the first item of a tuple there); None without one."""
    x = args[0] if isinstance(args, tuple) and args else args
    if isinstance(x, tuple):
        x = x[0] if x else None
    return x if x is not None and is_torch(x) else None


def accumulate_hook_input(core: Any, args: Any) -> None:
    """The imatrix forward pre-hook's work (R6.8.3): the module's first positional input
    (hook_input), detached and on the CPU, into ``core.accumulate_input``; a call
    without a tensor input is ignored. Shared by Observer.attach, the llm-compressor
    plugin and collect_importance, so all three accumulate the same rows."""
    x = hook_input(args)
    if x is None:
        return
    core.accumulate_input(x.detach().cpu())

class Observer:
    """A qobs observer. Construct with ``load_from_registry`` or a subclass."""

    _registry_name: Optional[str] = None

    def __init__(self, base_name: str, args: Any, options: Optional[ObserverOptions] = None, **observer_kwargs: Any):
        if self._registry_name is None:
            raise TypeError("use Observer.load_from_registry(name, ...) or a concrete observer class")
        self._init_core(self._registry_name, base_name, args, options, observer_kwargs)

    def _init_core(self, name, base_name, args, options, observer_kwargs):
        core_args = as_core_args(args)
        opts = options if options is not None else ObserverOptions()
        self._core = _qobs.load_observer(name, base_name, core_args, observer_kwargs, opts)
        self._kind = "numpy"
        self._bound_weight = None  # keeps a bound weight's memory alive (core holds a view)
        self._hook = None

    @classmethod
    def load_from_registry(
        cls,
        name: str,
        base_name: str = None,
        args: Any = None,
        options: Optional[ObserverOptions] = None,
        **observer_kwargs: Any,
    ) -> "Observer":
        """Observer `name` (normalized per R6.2.1; unknown -> KeyError) for `base_name`
        ("weight", "input", "output", "q", "k", "v") with `args`; extra keywords are
        merged into a copy of args.observer_kwargs."""
        if base_name is None or args is None:
            raise TypeError("load_from_registry needs base_name= and args=")
        if _qobs.normalize_observer_name(name) == "fouroversix":
            # R6.13.1: the reference's alias warns and hands back nvfp4_expanded_mse
            warnings.warn(
                "The 'fouroversix' observer is an alias for 'nvfp4_expanded_mse' (R6.13.1)",
                UserWarning,
                stacklevel=2,
            )
        sub = _CLASSES.get(_qobs.normalize_observer_name(name), Observer)
        obj = sub.__new__(sub)
        obj._init_core(name, base_name, args, options, observer_kwargs)
        return obj

    # -- identity ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._core.name

    @property
    def base_name(self) -> str:
        return self._core.base_name

    @property
    def args(self) -> QuantizationArgs:
        return QuantizationArgs._wrap(self._core.args)

    @property
    def options(self) -> ObserverOptions:
        return self._core.options

    @property
    def is_weight_obs(self) -> bool:
        return self._core.is_weight_observer

    # -- phase 1 -------------------------------------------------------------------
    def __call__(self, observed: Any) -> "Observer":
        """R6.1.2: accumulate statistics from `observed`; returns self."""
        self._core.observe(observed)
        self._kind = kind_of(observed)
        if self._core.name in IMATRIX_OBSERVERS:
            _warn_imatrix_fallback(self._core)
        return self

    forward = __call__

    def update_statistics_from_observed(self, observed: Any) -> None:
        """R6.1.2 on a value flattened already, shape (num_observations, *qparam_shape,
        group_size) as flatten_for_calibration returns it (R3.1): the statistics equal
        those of observing the unflattened value."""
        self._core.observe_flattened(observed)
        self._kind = kind_of(observed)
        if self._core.name in IMATRIX_OBSERVERS:
            _warn_imatrix_fallback(self._core)

    @property
    def has_statistics(self) -> bool:
        return self._core.has_statistics()

    def get_statistics(self) -> Dict[str, Any]:
        """R6.1.6: the named statistics (AssertionError when absent)."""
        return {_STAT_NAMES_REF.get(n, n): to_kind(t, self._kind) for n, t in self._core.get_statistics()}

    def __getattr__(self, attr: str) -> Any:
        # The reference keeps statistics as attributes (observer.min_vals); they exist
        # only while the observer has them, as hasattr() checks in the reference do.
        if attr.startswith("__") or attr in ("_core", "_kind", "_bound_weight", "_hook"):
            raise AttributeError(attr)
        core_name = _STAT_ALIASES.get(attr, attr)
        # export_statistics lists every statistic present, also before all of them
        # exist (imatrix importance accumulates before the weight is observed).
        for n, t, _ in self._core.export_statistics().items:
            if n == core_name:
                return to_kind(t, self._kind)
        raise AttributeError(f"{type(self).__name__} has no attribute {attr!r}")

    # -- phase 2 -------------------------------------------------------------------
    def get_qparams(self) -> Dict[str, Any]:
        """R6.1.4: {"scale", "zero_point", "global_scale"}; consumes the statistics."""
        s, z, g = self._core.get_qparams()
        return {"scale": to_kind(s, self._kind), "zero_point": to_kind(z, self._kind), "global_scale": to_kind(g, self._kind)}

    def get_global_scale(self) -> Any:
        """R6.1.5: the (fused) global scale for tensor_group, else None."""
        return to_kind(self._core.get_global_scale(), self._kind)

    def delete_statistics(self, check_fused: bool = True) -> None:
        """R6.10.4: cooperative deletion when fused (check_fused), else immediate."""
        self._core.delete_statistics(check_fused)

    # -- mergeable statistics -------------------------------------------------------
    def export_statistics(self) -> Statistics:
        return self._core.export_statistics()

    def import_statistics(self, stats: Statistics) -> None:
        self._core.import_statistics(stats)

    def merge_statistics(self, other: Any) -> None:
        """Combine `other` (Statistics or an Observer) into this observer's statistics
        with each statistic's reduce op (R6.11.1)."""
        if isinstance(other, Observer):
            other = other.export_statistics()
        self._core.merge_statistics(other)

    def sync_table(self) -> List[tuple]:
        return self._core.sync_table()

    # -- module hooks -------------------------------------------------------------
    def bind_weight(self, weight: Any) -> None:
        """Bind the module weight a fused partner observes on demand (R6.10.3). The
        weight is read in place when needed; the observer keeps a reference to it."""
        self._core.bind_weight(weight)
        self._bound_weight = weight
        # A partner may observe only this weight (never called itself): its results
        # come back as the weight's kind.
        self._kind = kind_of(weight)

    def unbind_weight(self) -> None:
        self._core.unbind_weight()
        self._bound_weight = None

    def attach(self, module: Any) -> None:
        """R6.1.7 / R6.8.3. `module` is a torch module (its in_features and a
        forward-pre hook are used) or an int in_features for a hook-less caller that
        feeds ``accumulate_input`` itself. Non-imatrix observers ignore it."""
        self._remove_hook()
        if isinstance(module, int):
            self._core.attach(module)
            return
        if not hasattr(module, "in_features"):
            return
        self._core.attach(int(module.in_features))
        if self._core.name not in IMATRIX_OBSERVERS:
            return
        core = self._core
        self._kind = "torch"  # a module's hook sees torch tensors

        def _hook(mod, args):
            accumulate_hook_input(core, args)

        self._hook = module.register_forward_pre_hook(_hook)

    def detach(self, module: Any = None) -> None:
        self._remove_hook()
        self._core.detach()

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def accumulate_input(self, x: Any) -> None:
        """The imatrix hook's work on one input batch: sum of x^2 per input feature."""
        self._core.accumulate_input(x)

    def grid_candidates(self) -> List[float]:
        """Shrink factors the MSE grid search evaluates (Q1/Q2); empty otherwise."""
        return self._core.grid_candidates()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_name={self.base_name!r}, args={self.args!r})"

    def __reduce__(self):
        # Copies (copy.deepcopy, pickle) carry the observer's configuration and its
        # statistics; fusion links, bound weights and module hooks belong to the
        # original and are not copied.
        o = self.options
        stats = self._core.export_statistics()
        return (
            _rebuild,
            (self.name, self.base_name, self._core.args.to_json(), (o.mode, o.label, o.f32_errors, o.chunked_search),
             None if stats.empty() else stats.serialize(), self._kind),
        )


def _rebuild(name, base_name, args_json, options, stats, kind):
    mode, label, f32_errors, chunked_search = options
    obs = Observer.load_from_registry(
        name, base_name=base_name, args=_qobs.QuantizationArgs.from_json(args_json),
        options=ObserverOptions(mode=mode, label=label, f32_errors=f32_errors, chunked_search=chunked_search))
    if stats is not None:
        obs._core.import_statistics(Statistics.deserialize(stats))
    obs._kind = kind
    return obs


def _concrete(cls_name: str, registry_name: str, doc: str) -> type:
    return type(cls_name, (Observer,), {"_registry_name": registry_name, "__doc__": doc})


MemorylessMinMaxObserver = _concrete("MemorylessMinMaxObserver", "memoryless_minmax", "R6.4.1")
StaticMinMaxObserver = _concrete("StaticMinMaxObserver", "static_minmax", "R6.4.2")
MinMaxObserver = _concrete("MinMaxObserver", "minmax", "R6.5 moving average")
MemorylessMSEObserver = _concrete("MemorylessMSEObserver", "memoryless_mse", "R6.7")
MovingAverageMSEObserver = _concrete("MovingAverageMSEObserver", "mse", "R6.7 moving average")
NVFP4ExpandedMSEObserver = _concrete("NVFP4ExpandedMSEObserver", "nvfp4_expanded_mse", "R6.7")
IMatrixMSEObserver = _concrete("IMatrixMSEObserver", "imatrix_mse", "R6.8")
NVFP4ExpandedIMatrixObserver = _concrete("NVFP4ExpandedIMatrixObserver", "nvfp4_expanded_imatrix", "R6.12")
# qobs's own least-squares observers (docs/LSQ.md), not in the reference
LsqMSEObserver = _concrete("LsqMSEObserver", "lsq_mse", "docs/LSQ.md#L1")
IMatrixLsqObserver = _concrete("IMatrixLsqObserver", "imatrix_lsq", "docs/LSQ.md#L3")

_CLASSES = {
    _qobs.normalize_observer_name(c._registry_name): c
    for c in (
        MemorylessMinMaxObserver,
        StaticMinMaxObserver,
        MinMaxObserver,
        MemorylessMSEObserver,
        MovingAverageMSEObserver,
        NVFP4ExpandedMSEObserver,
        IMatrixMSEObserver,
        NVFP4ExpandedIMatrixObserver,
        LsqMSEObserver,
        IMatrixLsqObserver,
    )
}
# R6.13.1: the alias builds the class of nvfp4_expanded_mse
_CLASSES["fouroversix"] = NVFP4ExpandedMSEObserver


def fuse_observers(observers: Sequence[Optional[Observer]], weights: Optional[Sequence[Any]] = None) -> None:
    """R6.10.2: link tensor_group weight observers of sibling layers so they share one
    global scale. `weights` (aligned with `observers`) are bound so that a partner
    without statistics observes its weight on demand (R6.10.3)."""
    if weights is not None:
        for o, w in zip(observers, weights):
            if o is not None and w is not None:
                o.bind_weight(w)
    _qobs.fuse_observers([None if o is None else o._core for o in observers])


def reduce_statistics(ranks: Iterable[Statistics]) -> Statistics:
    """All-reduce emulation over the statistics of several ranks."""
    return _qobs.reduce_statistics(list(ranks))


def registered_observers() -> List[str]:
    return _qobs.registered_observers()
