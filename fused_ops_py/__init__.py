"""fused-ops-py: fused CUDA kernels for PyTorch from a plain C library loaded
with cffi, so one wheel works with every torch and every CPython."""

from importlib import metadata as _metadata

from . import _ffi
from .functional import (
    fused_bias_scale_relu,
    fused_clamped_swiglu,
    fused_geglu,
    fused_rope,
    fused_swiglu,
    reduce_sum,
    relu,
    square,
)
from .losses import fused_cross_entropy, fused_linear_cross_entropy
from .modules import (
    FusedBiasScaleReLU,
    FusedCrossEntropyLoss,
    FusedLayerNorm,
    FusedLinearCrossEntropyLoss,
    FusedRMSNorm,
)
from .patching import PatchError, patch
from .normalization import (
    fused_add_layer_norm,
    fused_add_rms_norm,
    fused_layer_norm,
    fused_rms_norm,
)

try:
    __version__ = _metadata.version("fused-ops-py")
except _metadata.PackageNotFoundError:  # a source checkout, not installed
    __version__ = "0+unknown"


def library_path():
    """The path of the libfused_ops this process loaded (from
    $FUSED_OPS_PY_LIBRARY if set, else the one in the package)."""
    return str(_ffi.library_path)


__all__ = [
    "FusedBiasScaleReLU",
    "FusedCrossEntropyLoss",
    "FusedLayerNorm",
    "FusedLinearCrossEntropyLoss",
    "FusedRMSNorm",
    "PatchError",
    "fused_add_layer_norm",
    "fused_add_rms_norm",
    "fused_bias_scale_relu",
    "fused_clamped_swiglu",
    "fused_cross_entropy",
    "fused_geglu",
    "fused_layer_norm",
    "fused_linear_cross_entropy",
    "fused_rms_norm",
    "fused_rope",
    "fused_swiglu",
    "library_path",
    "patch",
    "reduce_sum",
    "relu",
    "square",
]
