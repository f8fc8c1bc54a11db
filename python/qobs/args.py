"""QuantizationArgs, QuantizationScheme and the preset schemes (RULES section 1).

The names, keywords and enum spellings are compressed-tensors'. Validation and
inference (R1.2, R1.3) run in the C++ core; this module only gives the results the
reference's Python shape: str-valued enums that compare equal to their spelling, and
torch dtypes for scale_dtype / zp_dtype when torch is installed.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Dict, List, Optional

from . import _qobs
from ._tensors import _torch

__all__ = [
    "QuantizationType",
    "QuantizationStrategy",
    "DynamicType",
    "ActivationOrdering",
    "QuantizationArgs",
    "QuantizationScheme",
    "preset_name_to_scheme",
    "is_preset_scheme",
    "PRESET_SCHEMES",
]


class QuantizationType(str, Enum):
    INT = "int"
    FLOAT = "float"


class QuantizationStrategy(str, Enum):
    TENSOR = "tensor"
    CHANNEL = "channel"
    GROUP = "group"
    BLOCK = "block"
    TOKEN = "token"
    TENSOR_GROUP = "tensor_group"
    ATTN_HEAD = "attn_head"


class DynamicType(str, Enum):
    LOCAL = "local"


# R1.1.4 aliases: dynamic == group, static == weight.
_ACTORDER_ALIASES = {"dynamic": "group", "static": "weight"}


class ActivationOrdering(str, Enum):
    WEIGHT = "weight"
    STATIC = "static"
    GROUP = "group"
    DYNAMIC = "dynamic"

    def __eq__(self, other: object) -> bool:
        # Alias-aware comparison (R1.1.4); the spelling given is kept for serialization.
        if isinstance(other, str):
            a = _ACTORDER_ALIASES.get(self.value, self.value)
            b = _ACTORDER_ALIASES.get(str(getattr(other, "value", other)).lower(), str(getattr(other, "value", other)).lower())
            return a == b
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_ACTORDER_ALIASES.get(self.value, self.value))


def _dtype_out(name: Optional[str]):
    """A dtype name as the reference holds it: a torch.dtype when torch is loaded."""
    if name is None:
        return None
    torch = _torch()
    if torch is None:
        try:
            import torch  # noqa: F811  (dtype objects are what reference code compares with)
        except ImportError:
            return name
    return getattr(torch, name)


_FIELDS = (
    "num_bits",
    "type",
    "symmetric",
    "group_size",
    "strategy",
    "block_structure",
    "dynamic",
    "actorder",
    "scale_dtype",
    "zp_dtype",
    "observer",
    "observer_kwargs",
)


class QuantizationArgs:
    """compressed-tensors' QuantizationArgs, validated by the C++ core.

    Accepts the reference's keywords and value forms: strategy/type as strings or
    enums, dynamic True/False/"local", actorder True/False/str, block_structure as a
    two-element list or "AxB", scale_dtype/zp_dtype as torch dtypes or their names.
    Unknown keywords raise ValueError (R1.2.1). Fields not given take the core's
    defaults; strategy, observer and zp_dtype are inferred (R1.3.1).
    """

    __slots__ = ("_core",)

    def __init__(self, **kwargs: Any):
        object.__setattr__(self, "_core", _qobs.QuantizationArgs(**kwargs))

    @classmethod
    def _wrap(cls, core: _qobs.QuantizationArgs) -> "QuantizationArgs":
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_core", core)
        return obj

    # -- fields ------------------------------------------------------------------
    @property
    def num_bits(self) -> int:
        return self._core.num_bits

    @property
    def type(self) -> QuantizationType:
        return QuantizationType(self._core.type)

    @property
    def symmetric(self) -> bool:
        return self._core.symmetric

    @property
    def group_size(self) -> Optional[int]:
        return self._core.group_size

    @property
    def strategy(self) -> Optional[QuantizationStrategy]:
        s = self._core.strategy
        return None if s is None else QuantizationStrategy(s)

    @property
    def block_structure(self) -> Optional[List[int]]:
        return self._core.block_structure

    @property
    def dynamic(self):
        d = self._core.dynamic
        return DynamicType(d) if isinstance(d, str) else d

    @property
    def actorder(self) -> Optional[ActivationOrdering]:
        a = self._core.actorder
        return None if a is None else ActivationOrdering(a)

    @property
    def scale_dtype(self):
        return _dtype_out(self._core.scale_dtype)

    @property
    def zp_dtype(self):
        return _dtype_out(self._core.zp_dtype)

    @property
    def observer(self) -> Optional[str]:
        return self._core.observer

    @property
    def observer_kwargs(self) -> Dict[str, Any]:
        return self._core.observer_kwargs

    def __setattr__(self, name: str, value: Any) -> None:
        # Assignment re-validates the whole object, as the reference's pydantic model
        # does on construction; the core decides whether the result is legal.
        if name not in _FIELDS:
            raise AttributeError(f"QuantizationArgs has no field {name!r}")
        object.__setattr__(self, "_core", _qobs.QuantizationArgs(**{**self._given(), name: value}))

    def _given(self) -> Dict[str, Any]:
        d = json.loads(self._core.to_json())
        # zp_dtype serializes as null when symmetric (R1.3.5); re-inference restores it.
        if d.get("zp_dtype") is None:
            d.pop("zp_dtype", None)
        return d

    # -- reference methods ---------------------------------------------------------
    def pytorch_dtype(self):
        return _dtype_out(self._core.pytorch_dtype())

    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        """Fields as a dict (R1.3.5 serialization: enums and dtypes as strings)."""
        return json.loads(self._core.to_json())

    def model_dump_json(self, indent: Optional[int] = None) -> str:
        return self._core.to_json(-1 if indent is None else indent)

    @classmethod
    def model_validate(cls, obj: Any) -> "QuantizationArgs":
        return as_core_args(obj, wrap=True)

    @classmethod
    def model_validate_json(cls, text: str) -> "QuantizationArgs":
        return cls._wrap(_qobs.QuantizationArgs.from_json(text))

    def model_copy(self, update: Optional[Dict[str, Any]] = None, deep: bool = False) -> "QuantizationArgs":
        return self._wrap(_qobs.QuantizationArgs(**{**self._given(), **(update or {})}))

    def get_observer(self) -> Optional[str]:
        return self.observer

    def __eq__(self, other: object) -> bool:
        if isinstance(other, QuantizationArgs):
            return self._core == other._core
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._core.to_json())

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.model_dump().items())
        return f"QuantizationArgs({fields})"

    def __reduce__(self):
        return (QuantizationArgs.model_validate_json, (self._core.to_json(),))


def as_core_args(args: Any, wrap: bool = False):
    """The core args of a qobs QuantizationArgs, a dict of keywords, or any object
    with the reference's ``model_dump_json`` (compressed-tensors' QuantizationArgs)."""
    if isinstance(args, QuantizationArgs):
        core = args._core
    elif isinstance(args, _qobs.QuantizationArgs):
        core = args
    elif isinstance(args, dict):
        core = _qobs.QuantizationArgs(**args)
    elif hasattr(args, "model_dump_json"):
        core = _qobs.QuantizationArgs.from_json(args.model_dump_json())
    else:
        raise TypeError(f"expected QuantizationArgs, got {type(args).__name__}")
    return QuantizationArgs._wrap(core) if wrap else core


def _opt_args(core) -> Optional[QuantizationArgs]:
    return None if core is None else QuantizationArgs._wrap(core)


class QuantizationScheme:
    """compressed-tensors' QuantizationScheme (R1.4), validated by the core."""

    __slots__ = ("_core",)

    def __init__(
        self,
        targets: List[str],
        weights: Any = None,
        input_activations: Any = None,
        output_activations: Any = None,
        format: Optional[str] = None,
    ):
        conv = lambda a: None if a is None else as_core_args(a)  # noqa: E731
        self._core = _qobs.QuantizationScheme(
            list(targets), conv(weights), conv(input_activations), conv(output_activations), format
        )

    @classmethod
    def _wrap(cls, core) -> "QuantizationScheme":
        obj = cls.__new__(cls)
        obj._core = core
        return obj

    @property
    def targets(self) -> List[str]:
        return list(self._core.targets)

    @property
    def weights(self) -> Optional[QuantizationArgs]:
        return _opt_args(self._core.weights)

    @property
    def input_activations(self) -> Optional[QuantizationArgs]:
        return _opt_args(self._core.input_activations)

    @property
    def output_activations(self) -> Optional[QuantizationArgs]:
        return _opt_args(self._core.output_activations)

    @property
    def format(self) -> Optional[str]:
        return self._core.format

    def model_dump(self) -> Dict[str, Any]:
        return json.loads(self._core.to_json())

    def model_dump_json(self, indent: Optional[int] = None) -> str:
        return self._core.to_json(-1 if indent is None else indent)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, QuantizationScheme):
            return self._core == other._core
        return NotImplemented

    def __repr__(self) -> str:
        return f"QuantizationScheme({self.model_dump()!r})"


def preset_name_to_scheme(name: str, targets: List[str]) -> QuantizationScheme:
    """R1.5: a fresh copy of preset `name` (case-insensitive; unknown -> KeyError)."""
    return QuantizationScheme._wrap(_qobs.preset_scheme(name, list(targets)))


def is_preset_scheme(name: str) -> bool:
    return _qobs.is_preset_name(name)


def _preset_fields(name: str) -> Dict[str, QuantizationArgs]:
    s = preset_name_to_scheme(name, [])
    out = {}
    for field in ("weights", "input_activations", "output_activations"):
        a = getattr(s, field)
        if a is not None:
            out[field] = a
    return out


# name -> dict of the scheme's args, as compressed-tensors' PRESET_SCHEMES (built from
# the core's table, R1.5).
PRESET_SCHEMES: Dict[str, Dict[str, QuantizationArgs]] = {n: _preset_fields(n) for n in _qobs.preset_names()}
