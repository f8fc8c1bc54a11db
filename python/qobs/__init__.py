"""qobs: llm-compressor's quantization observers and compressed-tensors' qparam math,
computed by a C++ core.

The names follow the reference (``qobs.QuantizationArgs``, ``qobs.Observer``,
``qobs.calculate_qparams``, ...). Arrays may be numpy arrays or CPU torch tensors and
are read in place; results come back as the kind given. ``import qobs.llmcompressor``
registers qobs-backed observers in llm-compressor's registry; ``qobs.cuda`` calibrates
weights in torch CUDA tensors on their device. See docs/PYTHON.md.
"""

from . import _qobs, cuda
from ._qobs import Tensor
from ._tensors import to_numpy, to_torch  # noqa: F401  (also installs Tensor.numpy/.torch)
from .args import (
    PRESET_SCHEMES,
    ActivationOrdering,
    DynamicType,
    QuantizationArgs,
    QuantizationScheme,
    QuantizationStrategy,
    QuantizationType,
    is_preset_scheme,
    preset_name_to_scheme,
)
from .cuda import available as cuda_available
from .functional import (
    calculate_qparams,
    compute_dynamic_scales_and_zp,
    dequantize,
    fake_quantize,
    flatten_for_calibration,
    generate_gparam,
    generate_mx_scales,
    quantize,
)
from .importance import collect_importance, merge_importance, read_importance
from .observer import (
    ACTIVATION_OBS,
    FUSED_LAYER_NAMES,
    IMatrixMSEObserver,
    IMatrixLsqObserver,
    LsqMSEObserver,
    MemorylessMinMaxObserver,
    MemorylessMSEObserver,
    MinMaxObserver,
    MovingAverageMSEObserver,
    NVFP4ExpandedMSEObserver,
    Observer,
    ObserverOptions,
    StaticMinMaxObserver,
    Statistics,
    fuse_observers,
    reduce_statistics,
    registered_observers,
)

__version__ = _qobs.__version__
#: {"compressed_tensors": ..., "llm_compressor": ...}: the releases qobs reproduces (R0.6)
reference_versions = _qobs.reference_versions

__all__ = [
    "ACTIVATION_OBS",
    "ActivationOrdering",
    "DynamicType",
    "FUSED_LAYER_NAMES",
    "IMatrixMSEObserver",
    "LsqMSEObserver",
    "IMatrixLsqObserver",
    "MemorylessMSEObserver",
    "MemorylessMinMaxObserver",
    "MinMaxObserver",
    "MovingAverageMSEObserver",
    "NVFP4ExpandedMSEObserver",
    "Observer",
    "ObserverOptions",
    "PRESET_SCHEMES",
    "QuantizationArgs",
    "QuantizationScheme",
    "QuantizationStrategy",
    "QuantizationType",
    "StaticMinMaxObserver",
    "Statistics",
    "Tensor",
    "calculate_qparams",
    "collect_importance",
    "compute_dynamic_scales_and_zp",
    "cuda_available",
    "dequantize",
    "fake_quantize",
    "flatten_for_calibration",
    "fuse_observers",
    "generate_gparam",
    "generate_mx_scales",
    "is_preset_scheme",
    "merge_importance",
    "preset_name_to_scheme",
    "quantize",
    "read_importance",
    "reduce_statistics",
    "reference_versions",
    "registered_observers",
]
