"""Input importance for ``qobs quantize --importance FILE`` (docs/PYTHON.md "Importance").

The importance-weighted observers (imatrix_mse, nvfp4_expanded_imatrix, imatrix_lsq)
weigh each weight column by E[x^2] of the Linear layer's inputs (docs/RULES.md R6.8.3).
``qobs quantize`` runs no model, so the importance is collected here, where the model
runs, and handed over in a file (R6.12.4):

    qobs.collect_importance(model, batches, "importance.safetensors")
    # several machines / data shards:
    qobs.merge_importance(["a.safetensors", "b.safetensors"], "importance.safetensors")

The sums are accumulated by the C++ core's ``accumulate_input`` (the imatrix observers'
own hook work, one observer per Linear), so a file holds bit for bit the statistics that
the observer would have accumulated over the same batches.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

from . import _qobs
from ._tensors import to_numpy
from .observer import accumulate_hook_input

__all__ = ["collect_importance", "merge_importance", "read_importance"]

Importance = Dict[str, Tuple[np.ndarray, int]]

# Any args do: only attach / accumulate_input are used, and they do not read them.
_ACCUMULATOR_ARGS = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}


def _as_dict(entries: Dict[str, Tuple[Any, int]]) -> Importance:
    return {name: (to_numpy(s), int(c)) for name, (s, c) in entries.items()}


def read_importance(path: str) -> Importance:
    """The validated contents of an importance file: {module: (importance_sum float32
    array, importance_count)}. Raises OSError for a file that is not one (truncated,
    corrupt, another format) and ValueError for bad values, naming the file and module."""
    return _as_dict(_qobs.read_importance(str(path)))


def merge_importance(paths: Iterable[str], out: str) -> Importance:
    """Combines importance files with the statistics' reduce op, SUM (counts add
    exactly; each sum element is the exact sum of the files' float32 values rounded once
    to float32), writes the result to `out` atomically and returns it. Merging a file of
    batches 1..k with a file of batch k+1 equals collecting all k+1 batches in one run,
    bit for bit; with more files or batches the result may differ from one sequential
    run in the last bits. Every file must cover the same modules with the same lengths
    (ValueError naming the file and module otherwise)."""
    return _as_dict(_qobs.merge_importance([str(p) for p in paths], str(out)))


def _module_filter(modules: Any) -> Callable[[str, Any], bool]:
    if modules is None:
        return lambda name, module: True
    if callable(modules):
        return modules
    wanted = set(modules)
    return lambda name, module: name in wanted


def collect_importance(
    model: Any,
    batches: Iterable[Any],
    path: Optional[str] = None,
    *,
    tokenizer: Any = None,
    tokenizer_kwargs: Optional[Dict[str, Any]] = None,
    modules: Union[None, Iterable[str], Callable[[str, Any], bool]] = None,
) -> Importance:
    """Runs `model` (a ``torch.nn.Module``, e.g. a transformers model) over `batches`
    and returns, and with `path` writes, per ``torch.nn.Linear`` the importance
    statistics of imatrix_mse (docs/RULES.md R6.8.3): ``importance_sum`` (float32, the
    sum of x^2 per input feature over every row of every input) and
    ``importance_count`` (the rows summed), keyed by the module's name in
    ``model.named_modules()`` -- the checkpoint's module names for a transformers model
    loaded from it.

    Each batch is a dict of tensors (``model(**batch)``, e.g. a tokenizer's output), a
    tensor (``model(batch)``) or a tuple / list (``model(*batch)``); tensors are moved to
    the model's device. With `tokenizer`, a batch may also be a text or a list of texts,
    tokenized as ``tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
    **tokenizer_kwargs)`` (padding tokens are inputs like any other, as in a padded
    calibration batch of llm-compressor). The model runs in eval mode under
    ``torch.no_grad()`` and is left in the mode it had. `modules` restricts the layers:
    names, or a predicate ``(name, module) -> bool``.

    A Linear no input reached (a count of 0) has no importance and is left out of the
    result with a warning naming it; ``qobs quantize --importance`` then refuses to
    quantize it with an importance-weighted observer. ValueError when no Linear was
    reached at all; writing also refuses a sum that is not finite (inputs with NaN /
    Inf), naming the module. The file is written atomically (a temporary file beside it,
    renamed): an error leaves nothing at `path`."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("qobs.collect_importance runs a torch model and needs torch (pip install torch)") from e

    keep = _module_filter(modules)
    args = _qobs.QuantizationArgs(**_ACCUMULATOR_ARGS)
    cores: Dict[str, Any] = {}
    hooks: List[Any] = []

    def make_hook(core: Any) -> Callable[..., None]:
        # The imatrix observers' forward pre-hook (qobs.Observer.attach, qobs.llmcompressor).
        def _hook(mod: Any, args: Any) -> None:
            accumulate_hook_input(core, args)

        return _hook

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and keep(name, module):
            core = _qobs.load_observer("imatrix_mse", "weight", args)
            core.attach(int(module.in_features))
            cores[name] = core
            hooks.append(module.register_forward_pre_hook(make_hook(core)))
    if not cores:
        raise ValueError("collect_importance: the model has no torch.nn.Linear module"
                         + ("" if modules is None else " selected by `modules`"))

    try:
        device = next(model.parameters()).device
    except StopIteration:
        device = torch.device("cpu")

    def to_device(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.to(device)
        if isinstance(v, dict):
            return {k: to_device(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(to_device(x) for x in v)
        return v

    def is_text(b: Any) -> bool:
        return isinstance(b, str) or (isinstance(b, (list, tuple)) and b and all(isinstance(t, str) for t in b))

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for i, batch in enumerate(batches):
                if is_text(batch):
                    if tokenizer is None:
                        raise TypeError(f"collect_importance: batch {i} is text; pass tokenizer= to tokenize it")
                    kw = {"return_tensors": "pt", "padding": True, "truncation": True, **(tokenizer_kwargs or {})}
                    batch = dict(tokenizer(list(batch) if not isinstance(batch, str) else batch, **kw))
                batch = to_device(batch)
                if isinstance(batch, dict):
                    model(**batch)
                elif isinstance(batch, torch.Tensor):
                    model(batch)
                elif isinstance(batch, (list, tuple)):
                    model(*batch)
                else:
                    raise TypeError(
                        f"collect_importance: batch {i} is a {type(batch).__name__}; expected a dict of tensors, a "
                        "tensor, a tuple of tensors, or text with tokenizer=")
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)

    entries: Dict[str, Tuple[Any, int]] = {}
    unreached = []
    for name, core in cores.items():
        stats = core.export_statistics()
        count = int(stats.find("importance_count").tolist_flat()[0])
        if count == 0:
            unreached.append(name)
        else:
            entries[name] = (stats.find("importance_sum"), count)
    if not entries:
        raise ValueError("collect_importance: no input reached any Linear module; were the batches empty?")
    if unreached:
        warnings.warn(f"collect_importance: no input reached {', '.join(unreached)}; left out (no importance)",
                      stacklevel=2)
    if path is not None:
        _qobs.write_importance(str(path), entries)
    return _as_dict(entries)
