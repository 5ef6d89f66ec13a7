"""LayerNorm and RMSNorm, alone or fused with the residual add and dropout of
a pre-norm transformer block: one autograd.Function for the family, and the
public functions that check their arguments first.

Forward saves what backward needs and no more: the normalized input h (x, or
residual_out, which the caller keeps anyway), and fp32 (fp64 for fp64) mean
and rstd per row. The dropout mask is never stored: backward regenerates it
from the forward pass's Philox seed and offset."""

import math

import torch

from . import _args, _ops
from ._args import DTYPE_CODES, address, as_rows, dense_like, device_args
from ._ffi import call, lib

LAYER, RMS = lib.FO_NORM_LAYER, lib.FO_NORM_RMS


def _stats_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def refuse_dropout_in_capture(device):
    """A seed captured in a CUDA graph would replay one mask forever."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "fused-ops-py: dropout_p > 0 cannot run inside CUDA graph capture: every "
            "replay would reuse one dropout mask. Capture with dropout_p=0, or run "
            "the dropout step outside the graph"
        )


def _dropout_seed(device, rows, cols):
    """(seed, offset) for the Philox stream of a dropout over rows x cols,
    drawn from torch's default generator of the device: torch.manual_seed
    reproduces it, and the offset advances so that consecutive calls differ."""
    if device.type == "cuda":
        refuse_dropout_in_capture(device)
        generator = torch.cuda.default_generators[device.index]
        offset = generator.get_offset()
        counters = rows * 2 * ((cols + 7) // 8)
        generator.set_offset(offset + (counters + 3) // 4 * 4)  # torch wants multiples of 4
        return generator.initial_seed(), offset
    seed = int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
    return seed, 0


def _forward(kind, x, residual, weight, bias, eps, dropout_p, cols, save_stats, seed_offset=None):
    """(y, residual_out or None, mean or None, rstd or None, seed, offset).
    The dropout stream is seed_offset when given, else drawn from torch."""
    x_view, rows, cols, x_stride = as_rows(x, cols)
    # the library reads parameters as cols dense elements
    weight = weight.contiguous() if weight is not None else None
    bias = bias.contiguous() if bias is not None else None
    device = device_args(x)
    y = dense_like(x)
    residual_out = residual_view = None
    residual_stride, residual_dtype = 0, x.dtype
    if residual is not None:
        residual_view, _, _, residual_stride = as_rows(residual, cols)
        residual_dtype = residual.dtype
        residual_out = dense_like(residual)
    mean = rstd = None
    if save_stats:
        stats = _stats_dtype(x.dtype)
        rstd = x.new_empty(rows, dtype=stats)
        mean = x.new_empty(rows, dtype=stats) if kind == LAYER else None
    seed = offset = 0
    if dropout_p > 0:
        seed, offset = seed_offset if seed_offset is not None else _dropout_seed(x.device, rows, cols)
    param = weight if weight is not None else bias
    param_dtype = param.dtype if param is not None else x.dtype
    call(
        lib.fo_norm_forward,
        *device, y.data_ptr(), address(residual_out), address(mean), address(rstd),
        x_view.data_ptr(), x_stride, address(residual_view), residual_stride,
        DTYPE_CODES[residual_dtype], address(weight), address(bias), DTYPE_CODES[param_dtype],
        rows, cols, DTYPE_CODES[x.dtype], kind, eps, dropout_p, seed, offset,
    )
    return y, residual_out, mean, rstd, seed, offset


class NormFunction(torch.autograd.Function):
    """Every member of the family: LayerNorm or RMSNorm (kind), with or
    without a residual, with or without dropout."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, kind, eps, dropout_p, cols):
        y, residual_out, mean, rstd, seed, offset = _forward(
            kind, x, residual, weight, bias, eps, dropout_p, cols, save_stats=True
        )
        h = residual_out if residual is not None else x
        ctx.save_for_backward(h, mean, rstd, weight)
        ctx.set_materialize_grads(False)  # no zero tensors for unused outputs
        ctx.residual_given = residual is not None
        ctx.config = (kind, dropout_p, seed, offset, cols, x.dtype, bias)
        if residual is None:
            return y
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual_out=None):
        h, mean, rstd, weight = ctx.saved_tensors
        kind, dropout_p, seed, offset, cols, x_dtype, bias = ctx.config
        grads = _backward(
            dy, dresidual_out, h, mean, rstd, weight, bias, kind, dropout_p, seed, offset,
            cols, x_dtype, ctx.residual_given, ctx.needs_input_grad[:4], share_dx=True,
        )
        return (*grads, None, None, None, None)


def _backward(dy, dresidual_out, h, mean, rstd, weight, bias, kind, dropout_p, seed, offset,
              cols, x_dtype, has_residual, wanted, share_dx):
    """(dx, dresidual, dweight, dbias), None where not wanted. share_dx lets
    dx be the very tensor dresidual is when their values agree."""
    want_x, want_residual, want_weight, want_bias = wanted
    weight_dense = weight.contiguous() if weight is not None else None
    if dy is None:  # only residual_out was used
        dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
    dy_view, rows, cols, dy_stride = as_rows(dy, cols)
    h_view, _, _, h_stride = as_rows(h, cols)
    device = device_args(dy)
    dro_view, dro_stride = None, 0
    if dresidual_out is not None:
        dro_view, _, _, dro_stride = as_rows(dresidual_out, cols)
    # with a residual and no dropout, dx and dresidual are the same values:
    # write them once when their dtypes agree
    shared = share_dx and has_residual and dropout_p == 0 and h.dtype == x_dtype and want_x
    dx = dresidual = dweight = dbias = scratch = None
    if want_x and not shared:
        dx = dense_like(h, x_dtype)
    if has_residual and (want_residual or shared):
        dresidual = dense_like(h)
    param = weight if weight is not None else bias
    param_dtype = param.dtype if param is not None else x_dtype
    if weight is not None and want_weight:
        dweight = dense_like(weight)
    if bias is not None and want_bias:
        dbias = dense_like(bias)
    if dweight is not None or dbias is not None:
        scratch = _args.workspace(
            lib.fo_norm_backward_workspace_bytes, device[0], rows, cols, DTYPE_CODES[x_dtype], like=h
        )
    call(
        lib.fo_norm_backward,
        *device, address(dx), address(dresidual), address(dweight), address(dbias),
        address(scratch), 0 if scratch is None else scratch.numel(),
        dy_view.data_ptr(), dy_stride, address(dro_view), dro_stride,
        h_view.data_ptr(), h_stride, DTYPE_CODES[h.dtype],
        address(mean), rstd.data_ptr(), address(weight_dense), DTYPE_CODES[param_dtype],
        rows, cols, DTYPE_CODES[x_dtype], kind, dropout_p, seed, offset,
    )
    if shared:
        dx = dresidual
    return dx, dresidual if want_residual else None, dweight, dbias


def _resolve_shape(fn, x, weight, normalized_shape):
    """normalized_shape as a tuple (default: weight's shape, else x's last
    dimension), checked against x; returns it and its element count."""
    if normalized_shape is None:
        if x.dim() and weight is not None and weight.dim() == 1 and weight.shape[0] == x.shape[-1]:
            return (x.shape[-1],), x.shape[-1]  # the common case, 0.2 us instead of 1
        normalized_shape = tuple(weight.shape) if weight is not None else tuple(x.shape[-1:])
    elif isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    else:
        normalized_shape = tuple(normalized_shape)
    if x.dim() == 0 or not normalized_shape or tuple(x.shape[x.dim() - len(normalized_shape):]) != normalized_shape:
        raise ValueError(
            f"{fn}: normalized_shape {normalized_shape} must be the trailing dimensions of "
            f"x, which has shape {tuple(x.shape)}"
        )
    return normalized_shape, math.prod(normalized_shape)


def _check_and_run(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    _args.check_tensor(fn, "x", x)
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None:
            _args.check_tensor(fn, name, value)
            _args.check_same_device(fn, name, value, x)
            _args.check_param_dtype(fn, name, value, x)
    normalized_shape, cols = _resolve_shape(fn, x, weight, normalized_shape)
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and value.shape != normalized_shape:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(value.shape)} but normalized_shape is {normalized_shape}"
            )
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise TypeError(f"{fn}: weight has dtype {weight.dtype} but bias has dtype {bias.dtype}; they must match")
    if residual is not None:
        _args.check_tensor(fn, "residual", residual)
        _args.check_same_device(fn, "residual", residual, x)
        _args.check_param_dtype(fn, "residual", residual, x)
        _args.check_same_shape(fn, "residual", residual, x)
    if eps is None:  # torch's RMSNorm default
        eps = torch.finfo(x.dtype).eps
    _args.check_finite_number(fn, "eps", eps)
    if eps <= 0:
        raise ValueError(f"{fn}: eps={eps} must be > 0")
    _args.check_finite_number(fn, "dropout_p", dropout_p)
    if not 0 <= dropout_p < 1:
        raise ValueError(f"{fn}: dropout_p={dropout_p} must be in [0, 1)")
    eps, dropout_p = float(eps), float(dropout_p)
    if _ops.compiling():
        y, residual_out, _, _ = torch.ops.fused_ops_py.norm(
            x, residual, weight, bias, kind, eps, dropout_p, cols, _ops.norm_seed_offset(dropout_p)
        )
        return y, residual_out if residual is not None else None
    if (
        x.requires_grad
        or (residual is not None and residual.requires_grad)
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    ) and torch.is_grad_enabled():
        out = NormFunction.apply(x, residual, weight, bias, kind, eps, dropout_p, cols)
        return out if residual is not None else (out, None)
    y, residual_out, *_ = _forward(kind, x, residual, weight, bias, eps, dropout_p, cols, save_stats=False)
    return y, residual_out


def fused_layer_norm(x, weight=None, bias=None, eps=1e-5, normalized_shape=None):
    """torch.nn.functional.layer_norm over the trailing normalized_shape
    (default: weight's shape, else x's last dimension)."""
    return _check_and_run("fused_layer_norm", LAYER, x, None, weight, bias, eps, 0.0, normalized_shape)[0]


def fused_rms_norm(x, weight=None, eps=None, normalized_shape=None):
    """torch.nn.functional.rms_norm over the trailing normalized_shape;
    eps=None means torch.finfo(x.dtype).eps, as in torch."""
    return _check_and_run("fused_rms_norm", RMS, x, None, weight, None, eps, 0.0, normalized_shape)[0]


def fused_add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, dropout_p=0.0):
    """(layer_norm(h), h) with h = dropout(x, dropout_p) + residual: the
    pre-norm transformer block in one pass. residual may be fp32 beside
    fp16/bf16 x (an fp32 residual stream); h keeps residual's dtype."""
    return _check_and_run("fused_add_layer_norm", LAYER, x, residual, weight, bias, eps, dropout_p, None)


def fused_add_rms_norm(x, residual, weight=None, eps=None, dropout_p=0.0):
    """(rms_norm(h), h) with h = dropout(x, dropout_p) + residual."""
    return _check_and_run("fused_add_rms_norm", RMS, x, residual, weight, None, eps, dropout_p, None)
