"""LayerNorm and RMSNorm, alone or fused with the residual add and dropout of
a pre-norm transformer block: one autograd.Function for the family, and the
public functions that check their arguments first.

Forward saves what backward needs and no more: the normalized input h (x, or
residual_out, which the caller keeps anyway), and fp32 (fp64 for fp64) mean
and rstd per row, in one buffer. The dropout mask is never stored: backward
regenerates it from the forward pass's Philox seed and offset.

Every call pays for its host time (a tiny tensor's kernel is cheaper than
the Python around it), so the common path reads each attribute once and
calls few functions: the checks first test the common case in a few
attribute reads, and only otherwise run the full checks that explain what
is wrong."""

import math

import torch

from . import _args, _ops
from ._args import DTYPE_CODES, as_rows, dense_like, device_args, param_dtype_ok
from ._ffi import SYNC, finish, lib

LAYER, RMS = lib.FO_NORM_LAYER, lib.FO_NORM_RMS
Tensor = torch.Tensor

# torch's RMSNorm default eps, torch.finfo(dtype).eps: a lookup instead of a
# call of 0.5 us
_DEFAULT_EPS = {dtype: torch.finfo(dtype).eps for dtype in DTYPE_CODES}


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


def packed_stats(x, rows, kind):
    """Where forward writes mean and rstd when autograd saves them: one new
    buffer of rows rstds then rows means (no means for RMSNorm), fp32 (fp64
    for fp64 x): one allocation (1 us) instead of two, and one saved tensor.
    (buffer, mean address or 0, rstd address)."""
    stats = x.new_empty(rows if kind == RMS else 2 * rows, dtype=_stats_dtype(x.dtype))
    rstd = stats.data_ptr()
    return stats, 0 if kind == RMS else rstd + rows * stats.itemsize, rstd


def stats_addresses(stats, kind):
    """(mean address or 0, rstd address) in a packed_stats buffer."""
    rstd = stats.data_ptr()
    return 0 if kind == RMS else rstd + stats.nbytes // 2, rstd


def _forward(kind, x, residual, weight, bias, eps, dropout_p, cols, new_stats=None, seed_offset=None):
    """(y, residual_out or None, stats or None, seed, offset). new_stats(x,
    rows, kind) gives (stats, mean address, rstd address) for mean and rstd
    to be saved (packed_stats, or the registered op's two tensors); None
    saves neither. The dropout stream is seed_offset when given, else drawn
    from torch."""
    x_view, rows, cols, x_stride = as_rows(x, cols)
    # the library reads parameters as cols dense elements
    weight = weight.contiguous() if weight is not None else None
    bias = bias.contiguous() if bias is not None else None
    device = device_args(x)
    y = dense_like(x)
    code = DTYPE_CODES[x.dtype]
    residual_out = None
    residual_address = residual_stride = residual_out_address = 0
    residual_code = code
    if residual is not None:
        residual_view, _, _, residual_stride = as_rows(residual, cols)
        residual_address = residual_view.data_ptr()
        residual_code = DTYPE_CODES[residual.dtype]
        residual_out = dense_like(residual)
        residual_out_address = residual_out.data_ptr()
    stats, mean, rstd = new_stats(x, rows, kind) if new_stats is not None else (None, 0, 0)
    seed = offset = 0
    if dropout_p > 0:
        seed, offset = seed_offset if seed_offset is not None else _dropout_seed(x.device, rows, cols)
    param = weight if weight is not None else bias
    status = lib.fo_norm_forward(
        *device, y.data_ptr(), residual_out_address, mean, rstd,
        x_view.data_ptr(), x_stride, residual_address, residual_stride, residual_code,
        weight.data_ptr() if weight is not None else 0, bias.data_ptr() if bias is not None else 0,
        DTYPE_CODES[param.dtype] if param is not None else code,
        rows, cols, code, kind, eps, dropout_p, seed, offset,
    )
    if status or SYNC:
        finish(lib.fo_norm_forward, status, device)
    return y, residual_out, stats, seed, offset


class NormFunction(torch.autograd.Function):
    """Every member of the family: LayerNorm or RMSNorm (kind), with or
    without a residual, with or without dropout.
    apply(x, weight, bias, (kind, eps, dropout_p, cols)[, residual]): the
    fewest arguments, since each costs apply 0.2 us (None and numbers too)."""

    @staticmethod
    def forward(ctx, x, weight, bias, config, residual=None):
        kind, eps, dropout_p, cols = config
        y, residual_out, stats, seed, offset = _forward(
            kind, x, residual, weight, bias, eps, dropout_p, cols, packed_stats
        )
        ctx.config = (kind, dropout_p, seed, offset, cols, x.dtype, residual is not None)
        if residual is None:
            ctx.save_for_backward(x, stats, weight, bias)
            return y
        ctx.save_for_backward(residual_out, stats, weight, bias)
        # an unused output gets None, not a zero tensor (0.15 us, so only
        # here: backward makes the zeros of an unused y itself)
        ctx.set_materialize_grads(False)
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual_out=None):
        h, stats, weight, bias = ctx.saved_tensors
        kind, dropout_p, seed, offset, cols, x_dtype, has_residual = ctx.config
        wants = ctx.needs_input_grad  # x, weight, bias, config[, residual]
        dx, dresidual, dweight, dbias = _backward(
            dy, dresidual_out, h, *stats_addresses(stats, kind), weight, bias, kind, dropout_p,
            seed, offset, cols, x_dtype, has_residual,
            (wants[0], has_residual and wants[4], wants[1], wants[2]), share_dx=True,
        )
        if has_residual:
            return dx, dweight, dbias, None, dresidual
        return dx, dweight, dbias, None


def _where_address(address):
    """All the workspace query looks at in an address: 0 or not, and its
    place within 16 bytes. Passed that alone, its answer is remembered
    (_args.workspace_bytes) across calls on fresh tensors."""
    return 16 + address % 16 if address else 0


def _where(tensor):
    return _where_address(tensor.data_ptr()) if tensor is not None else 0


def _backward(dy, dresidual_out, h, mean, rstd, weight, bias, kind, dropout_p, seed, offset,
              cols, x_dtype, has_residual, wanted, share_dx):
    """(dx, dresidual, dweight, dbias), None where not wanted. mean (0 for
    RMSNorm) and rstd are addresses. share_dx lets dx be the very tensor
    dresidual is when their values agree."""
    want_x, want_residual, want_weight, want_bias = wanted
    weight_dense = weight.contiguous() if weight is not None else None
    if dy is None:  # only residual_out was used
        dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
    dy_view, rows, cols, dy_stride = as_rows(dy, cols)
    h_view, _, _, h_stride = as_rows(h, cols)
    device = device_args(dy)
    dro_address = dro_stride = 0
    if dresidual_out is not None:
        dro_view, _, _, dro_stride = as_rows(dresidual_out, cols)
        dro_address = dro_view.data_ptr()
    # with a residual and no dropout, dx and dresidual are the same values:
    # write them once when their dtypes agree
    shared = share_dx and has_residual and dropout_p == 0 and h.dtype == x_dtype and want_x
    dx = dresidual = dweight = dbias = scratch = None
    if want_x and not shared:
        dx = dense_like(h, x_dtype)
    if has_residual and (want_residual or shared):
        dresidual = dense_like(h)
    param = weight if weight is not None else bias
    code = DTYPE_CODES[x_dtype]
    if weight is not None and want_weight:
        dweight = dense_like(weight)
    if bias is not None and want_bias:
        dbias = dense_like(bias)
    if dweight is not None or dbias is not None:
        # none where the kernel parks its partials in dx (or dresidual);
        # else the bias partials only where dbias is wanted
        scratch = _args.workspace(
            lib.fo_norm_backward_workspace_bytes, device[0], device[1],
            *map(_where, (dx, dresidual, dweight, dbias, dy_view)), dy_stride,
            _where_address(dro_address), dro_stride, _where(h_view), h_stride, DTYPE_CODES[h.dtype],
            _where(weight_dense), DTYPE_CODES[param.dtype] if param is not None else code, rows, cols, code,
            like=h,
        )
    status = lib.fo_norm_backward(
        *device, dx.data_ptr() if dx is not None else 0,
        dresidual.data_ptr() if dresidual is not None else 0,
        dweight.data_ptr() if dweight is not None else 0, dbias.data_ptr() if dbias is not None else 0,
        scratch.data_ptr() if scratch is not None else 0, scratch.numel() if scratch is not None else 0,
        dy_view.data_ptr(), dy_stride, dro_address, dro_stride,
        h_view.data_ptr(), h_stride, DTYPE_CODES[h.dtype],
        mean, rstd, weight_dense.data_ptr() if weight_dense is not None else 0,
        DTYPE_CODES[param.dtype] if param is not None else code,
        rows, cols, code, kind, dropout_p, seed, offset,
    )
    if status or SYNC:
        finish(lib.fo_norm_backward, status, device)
    if shared:
        dx = dresidual
    return dx, dresidual if want_residual else None, dweight, dbias


def _common_case_cols(x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """x's last dimension when the arguments are the common case, which
    every check passes: x on the CPU or CUDA; weight, bias and residual of
    its device, residual of its shape and dtype, weight and bias of its last
    dimension and of its dtype (or both float32 beside float16/bfloat16 x);
    eps None or a float in range, dropout_p a float in range. Else 0, and
    _check_fully runs (5 us, where this reads a few attributes at 0.07 us
    each)."""
    if not (isinstance(x, Tensor) and (x.is_cpu or x.is_cuda)):
        return 0
    dtype, shape, device = x.dtype, x.shape, x.device
    if not shape or dtype not in DTYPE_CODES:
        return 0
    cols = shape[-1]
    if normalized_shape is not None and not (isinstance(normalized_shape, tuple) and normalized_shape == (cols,)):
        return 0
    if not ((eps is None or type(eps) is float and 0.0 < eps < math.inf)
            and type(dropout_p) is float and 0.0 <= dropout_p < 1.0):
        return 0
    if residual is not None and not (
        isinstance(residual, Tensor) and param_dtype_ok(residual.dtype, dtype)
        and residual.device == device and residual.shape == shape
    ):
        return 0
    param = weight if weight is not None else bias
    if param is None:
        return cols
    param_dtype = param.dtype if isinstance(param, Tensor) else None
    if not param_dtype_ok(param_dtype, dtype):
        return 0
    for value in (weight, bias):
        if value is not None and not (
            isinstance(value, Tensor) and value.dtype is param_dtype and value.device == device
            and value.shape == (cols,)
        ):
            return 0
    return cols


def _check_fully(fn, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """Every check, each raising with a message that names the problem:
    (cols, eps, dropout_p) once they pass."""
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
        eps = _DEFAULT_EPS[x.dtype]
    _args.check_finite_number(fn, "eps", eps)
    if eps <= 0:
        raise ValueError(f"{fn}: eps={eps} must be > 0")
    _args.check_finite_number(fn, "dropout_p", dropout_p)
    if not 0 <= dropout_p < 1:
        raise ValueError(f"{fn}: dropout_p={dropout_p} must be in [0, 1)")
    return cols, float(eps), float(dropout_p)


def _resolve_shape(fn, x, weight, normalized_shape):
    """normalized_shape as a tuple (default: weight's shape, else x's last
    dimension), checked against x; returns it and its element count."""
    if normalized_shape is None:
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
    cols = _common_case_cols(x, residual, weight, bias, eps, dropout_p, normalized_shape)
    if not cols:
        cols, eps, dropout_p = _check_fully(fn, x, residual, weight, bias, eps, dropout_p, normalized_shape)
    elif eps is None:  # torch's RMSNorm default
        eps = _DEFAULT_EPS[x.dtype]
    if _ops.compiling():
        y, residual_out, _, _ = torch.ops.fused_ops_py.norm(
            x, residual, weight, bias, kind, eps, dropout_p, cols, _ops.norm_seed_offset(dropout_p)
        )
        return y, residual_out if residual is not None else None
    if torch.is_grad_enabled() and (
        x.requires_grad
        or (residual is not None and residual.requires_grad)
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    ):
        config = (kind, eps, dropout_p, cols)
        if residual is None:
            return NormFunction.apply(x, weight, bias, config), None
        return NormFunction.apply(x, weight, bias, config, residual)
    y, residual_out, _, _, _ = _forward(kind, x, residual, weight, bias, eps, dropout_p, cols)
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
