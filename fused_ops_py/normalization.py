"""LayerNorm and RMSNorm, alone or fused with the residual add and dropout of
a pre-norm transformer block: the public functions. Each takes one of three
paths: the registered op while torch.compile traces, the autograd.Function
when a gradient is wanted, else the raw call (no autograd bookkeeping)."""

import torch

from . import _calls
from ._args import DTYPE_CODES
from ._autograd import apply_norm
from ._ops import compiling, norm_seed_offset

LAYER, RMS = _calls.LAYER, _calls.RMS

# torch's RMSNorm default eps, torch.finfo(dtype).eps
_DEFAULT_EPS = {dtype: torch.finfo(dtype).eps for dtype in DTYPE_CODES}


def _norm(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """(y, residual_out or None)."""
    if eps is None:  # a non-tensor x or an unsupported dtype: the checks name it
        eps = _DEFAULT_EPS[x.dtype] if isinstance(x, torch.Tensor) and x.dtype in _DEFAULT_EPS else None
    if compiling():
        shape = _calls.check_norm(fn, x, residual, weight, bias, normalized_shape)
        y, residual_out, _ = torch.ops.fused_ops_py.norm(
            x, residual, weight, bias, kind, eps, dropout_p, list(shape), norm_seed_offset(dropout_p)
        )
        return y, residual_out if residual is not None else None
    try:
        wants_grad = torch.is_grad_enabled() and (
            x.requires_grad
            or (weight is not None and weight.requires_grad)
            or (bias is not None and bias.requires_grad)
            or (residual is not None and residual.requires_grad)
        )
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        out = apply_norm(x, residual, weight, bias, (fn, kind, eps, dropout_p, normalized_shape))
        return out if residual is not None else (out, None)
    return _calls.norm_forward(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, False)[:2]


def fused_layer_norm(x, weight=None, bias=None, eps=1e-5, normalized_shape=None):
    """torch.nn.functional.layer_norm over the trailing normalized_shape
    (default: weight's shape, else x's last dimension)."""
    return _norm("fused_layer_norm", LAYER, x, None, weight, bias, eps, 0.0, normalized_shape)[0]


def _offset_weight(fn, weight, offset, x, normalized_shape):
    """offset + weight in fp32 (Gemma's x * rstd * (1 + weight)): the kernels
    take an fp32 weight beside any x, and autograd carries its gradient back
    to weight through the addition. weight itself where offset is 0."""
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"{fn}: offset must be a float, got {type(offset).__name__}")
    if offset == 0:
        return weight
    if weight is None:
        shape = normalized_shape if normalized_shape is not None else x.shape[-1:]
        return torch.full(tuple(shape) if not isinstance(shape, int) else (shape,), float(offset),
                          dtype=torch.float32, device=x.device)
    return weight.float() + float(offset)


def fused_rms_norm(x, weight=None, eps=None, normalized_shape=None, offset=0.0):
    """torch.nn.functional.rms_norm over the trailing normalized_shape;
    eps=None means torch.finfo(x.dtype).eps, as in torch. offset: x * rstd *
    (offset + weight), the sum in fp32 (Gemma's RMSNorm is offset=1.0)."""
    if type(offset) is not float or offset:  # the default 0.0 costs one test
        weight = _offset_weight("fused_rms_norm", weight, offset, x, normalized_shape)
    return _norm("fused_rms_norm", RMS, x, None, weight, None, eps, 0.0, normalized_shape)[0]


def fused_add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, dropout_p=0.0):
    """(layer_norm(h), h) with h = dropout(x, dropout_p) + residual: the
    pre-norm transformer block in one pass. residual may be fp32 beside
    fp16/bf16 x (an fp32 residual stream); h keeps residual's dtype."""
    return _norm("fused_add_layer_norm", LAYER, x, residual, weight, bias, eps, dropout_p, None)


def fused_add_rms_norm(x, residual, weight=None, eps=None, dropout_p=0.0, offset=0.0):
    """(rms_norm(h), h) with h = dropout(x, dropout_p) + residual; offset as
    in fused_rms_norm."""
    if type(offset) is not float or offset:
        weight = _offset_weight("fused_add_rms_norm", weight, offset, x, None)
    return _norm("fused_add_rms_norm", RMS, x, residual, weight, None, eps, dropout_p, None)
