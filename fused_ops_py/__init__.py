"""fused-ops-py: fused CUDA kernels for PyTorch from a plain C library loaded
with cffi, so one wheel works with every torch and every CPython."""

from importlib import metadata as _metadata

from . import _ffi
from .float8_linear import Float8Input, Float8Linear, SharedInputCast
from .modules import (
    FusedBiasScaleReLU,
    FusedCrossEntropyLoss,
    FusedDyT,
    FusedLayerNorm,
    FusedLinearCrossEntropyLoss,
    FusedRMSNorm,
)
from .ops.bias_scale_relu import fused_bias_scale_relu, relu
from .ops.clamped_swiglu import fused_clamped_swiglu
from .ops.cross_entropy import fused_cross_entropy
from .ops.dyt import fused_dyt
from .ops.geglu import fused_geglu
from .ops.linear_cross_entropy import fused_linear_cross_entropy
from .ops.norm import fused_add_layer_norm, fused_add_rms_norm, fused_layer_norm, fused_rms_norm
from .ops.quantize_fp8 import fused_quantize_fp8
from .ops.reduce_sum import reduce_sum
from .ops.rope import fused_rope
from .ops.square import square
from .ops.swiglu import fused_swiglu
from .patching import PatchError, patch

try:
    __version__ = _metadata.version("fused-ops-py")
except _metadata.PackageNotFoundError:  # a source checkout, not installed
    __version__ = "0+unknown"


def library_path():
    """The path of the libfused_ops this process loaded (from
    $FUSED_OPS_PY_LIBRARY if set, else the one in the package)."""
    return str(_ffi.library_path)


__all__ = [
    "Float8Input",
    "Float8Linear",
    "FusedBiasScaleReLU",
    "FusedCrossEntropyLoss",
    "FusedDyT",
    "FusedLayerNorm",
    "FusedLinearCrossEntropyLoss",
    "FusedRMSNorm",
    "PatchError",
    "SharedInputCast",
    "fused_add_layer_norm",
    "fused_add_rms_norm",
    "fused_bias_scale_relu",
    "fused_clamped_swiglu",
    "fused_cross_entropy",
    "fused_dyt",
    "fused_quantize_fp8",
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
