"""LayerNorm and RMSNorm, alone or fused with the residual add and dropout of
a pre-norm transformer block (fo_norm_*)."""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like, device_args
from .._core import (
    AVAILABLE,
    address,
    call_struct,
    compiling,
    cuda_index,
    custom_op,
    eager_apply,
    empty,
    new_struct,
    or_empty,
    prepared,
    scratch,
    stats_dtype,
)
from .._ffi import SYNC, ffi, finish, lib
from .norm_dropout import dropout_seed_offset, norm_seed_offset, seed_offset_values

# the raw calls -------------------------------------------------------------------------


LAYER, RMS = lib.FO_NORM_LAYER, lib.FO_NORM_RMS

_NORM_FORWARD = ffi.typeof("fo_norm_forward_args *")
_NORM_BACKWARD = ffi.typeof("fo_norm_backward_args *")


#
# Statistics go in one buffer: rows rstds, then rows means (LayerNorm only),
# one allocation and one saved tensor.


def check_norm(fn, x, residual, weight, bias, normalized_shape):
    """What only Python can see of a norm's arguments; returns
    normalized_shape as a tuple (default: weight's shape, else x's last
    dimension)."""
    _args.check_tensor(fn, "x", x)
    if normalized_shape is None:
        normalized_shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else tuple(x.shape[-1:])
    elif isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    else:
        normalized_shape = tuple(normalized_shape)
    if x.dim() == 0 or not normalized_shape or tuple(x.shape[x.dim() - len(normalized_shape) :]) != normalized_shape:
        raise ValueError(
            f"{fn}: normalized_shape {normalized_shape} must be the trailing dimensions of "
            f"x, which has shape {tuple(x.shape)}"
        )
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None:
            _args.check_companion(fn, name, value, x)
            if value.shape != normalized_shape:
                raise ValueError(
                    f"{fn}: {name} has shape {tuple(value.shape)} but normalized_shape is {normalized_shape}"
                )
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise TypeError(f"{fn}: weight has dtype {weight.dtype} but bias has dtype {bias.dtype}; they must match")
    if residual is not None:
        _args.check_companion(fn, "residual", residual, x)
        _args.check_same_shape(fn, "residual", residual, x)
    return normalized_shape


def _norm_forward_plan(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """(template struct, rows, cols, x is used as it is, CUDA index, backward
    template, free structs) for a signature."""
    cols = math.prod(check_norm(fn, x, residual, weight, bias, normalized_shape))
    eps = _args.check_number(fn, "eps", eps)
    dropout_p = _args.check_number(fn, "dropout_p", dropout_p)
    _, rows, _, x_stride = as_rows(x, cols)
    code = DTYPE_CODES[x.dtype]
    param = weight if weight is not None else bias
    residual_stride, residual_code = 0, code
    if residual is not None:
        residual_stride, residual_code = as_rows(residual, cols)[3], DTYPE_CODES[residual.dtype]
    template = new_struct(
        _NORM_FORWARD,
        (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        x_row_stride=x_stride,
        residual_row_stride=residual_stride,
        residual_dtype=residual_code,
        param_dtype=DTYPE_CODES[param.dtype] if param is not None else code,
        rows=rows,
        cols=cols,
        dtype=code,
        kind=kind,
        eps=eps,
        dropout_p=dropout_p,
    )
    dense = x.is_contiguous() and (residual is None or residual.is_contiguous())
    # then the backward's template for dense gradients, made by the first
    # forward that prepares a backward, and the free structs of calls
    # without and with statistics (which write rstd and mean)
    return template, rows, cols, dense, cuda_index(x), [None], ([], [])


_norm_forward_plans = {}


def norm_forward(
    fn,
    kind,
    x,
    residual,
    weight,
    bias,
    eps,
    dropout_p,
    normalized_shape,
    save_stats,
    seed_offset=None,
    prepare_backward=False,
):
    """(y, residual_out or None, stats or None, seed_offset or None, cols,
    backward or None): the forward pass; stats (for backward) only when
    save_stats, and with prepare_backward the backward's struct for dense
    gradients and a dense h (norm_backward_prepared). The dropout stream
    is seed_offset when given (a (seed, offset) pair: ints, or an int64
    tensor under torch.compile), else drawn from torch's generator of x's
    device."""
    try:
        # only float scalars are remembered: True == 1 == 1.0 as keys
        if type(eps) is not float or type(dropout_p) is not float:
            raise TypeError
        key = (
            kind,
            x.shape,
            x.stride(),
            x.dtype,
            x.device,
            eps,
            dropout_p,
            normalized_shape,
            None if weight is None else (weight.shape, weight.dtype, weight.device),
            None if bias is None else (bias.shape, bias.dtype, bias.device),
            None if residual is None else (residual.shape, residual.stride(), residual.dtype, residual.device),
        )
    except (AttributeError, TypeError):  # not tensors, or eps and dropout_p not floats
        key = None
    template, rows, cols, dense, cuda_index, backward_template, free = prepared(
        _norm_forward_plans,
        key,
        _norm_forward_plan,
        fn,
        kind,
        x,
        residual,
        weight,
        bias,
        eps,
        dropout_p,
        normalized_shape,
    )
    free = free[1 if save_stats else 0]
    a = call_struct(_NORM_FORWARD, template, cuda_index, free)
    if dense:
        y = torch.empty_like(x)
        x_rows, residual_rows = x, residual
    else:  # views, or copies where no view has dense rows: kept alive until the call returns
        y = dense_like(x)
        x_rows = as_rows(x, cols)[0]
        residual_rows = as_rows(residual, cols)[0] if residual is not None else None
    a.x = x_rows.data_ptr()
    a.y = y.data_ptr()
    # the library reads parameters as cols dense elements
    if weight is not None:
        weight = weight.contiguous()
        a.weight = weight.data_ptr()
    if bias is not None:
        bias = bias.contiguous()
        a.bias = bias.data_ptr()
    residual_out = stats = None
    if residual is not None:
        residual_out = dense_like(residual)
        a.residual_out = residual_out.data_ptr()
        a.residual = residual_rows.data_ptr()
    if save_stats:
        stats = x.new_empty(rows if kind == RMS else 2 * rows, dtype=stats_dtype(x.dtype))
        a.rstd = address = stats.data_ptr()
        if kind == LAYER:
            a.mean = address + rows * stats.itemsize
    if dropout_p > 0:
        if seed_offset is None:
            seed_offset = dropout_seed_offset(x, rows, cols)
        a.seed, a.offset = seed_offset_values(seed_offset)
    status = lib.fo_norm_forward(a)
    if status or SYNC:
        finish(lib.fo_norm_forward, status, (a.device_type, a.device_index))
    backward = None
    if prepare_backward and (residual is not None or dense):
        # y and residual_out stand in for the gradients: dense, of their
        # shapes and dtypes. h (x, or residual_out) is dense too: a
        # saved-tensor hook's copy at h's address then has h's layout.
        if backward_template[0] is None:
            backward_template[0] = _norm_backward_plan(
                y, residual_out, x if residual is None else residual_out, weight, bias, kind, dropout_p, cols, x.dtype
            )[0]
        template = backward_template[0]
        b = ffi.new(_NORM_BACKWARD, template[0])
        b.stream = a.stream  # autograd runs backward on the forward's stream
        b.h = a.x if residual is None else a.residual_out
        b.seed, b.offset = a.seed, a.offset
        backward = (b, template)
    free.append(a)
    return y, residual_out, stats, seed_offset, cols, backward


def _norm_backward_plan(dy, dresidual_out, h, weight, bias, kind, dropout_p, cols, x_dtype):
    """(template struct, rows, CUDA index) for a backward signature:
    everything but the addresses, the stream and the workspace."""
    _, rows, _, dy_stride = as_rows(dy, cols)
    code = DTYPE_CODES[x_dtype]
    param = weight if weight is not None else bias
    template = new_struct(
        _NORM_BACKWARD,
        device_args(dy)[:2],
        dy_row_stride=dy_stride,
        h_row_stride=as_rows(h, cols)[3],
        h_dtype=DTYPE_CODES[h.dtype],
        dresidual_out_row_stride=as_rows(dresidual_out, cols)[3] if dresidual_out is not None else 0,
        param_dtype=DTYPE_CODES[param.dtype] if param is not None else code,
        rows=rows,
        cols=cols,
        dtype=code,
        kind=kind,
        dropout_p=dropout_p,
    )
    return template, rows, cuda_index(dy)


_norm_backward_plans = {}
_norm_backward_workspaces = {}


def norm_backward(
    dy,
    dresidual_out,
    h,
    stats,
    weight,
    bias,
    kind,
    dropout_p,
    cols,
    seed_offset,
    x_dtype,
    has_residual,
    want_x,
    want_residual,
    want_weight,
    want_bias,
    share_dx=False,
):
    """(dx, dresidual, dweight, dbias), None where not wanted. share_dx lets
    dx be the very tensor dresidual is when their values agree (no
    dropout, one dtype)."""
    key = (
        dy.shape,
        dy.stride(),
        dy.dtype,
        dy.device,
        h.stride(),
        h.dtype,
        None if dresidual_out is None else dresidual_out.stride(),
        None if weight is None else weight.dtype,
        None if bias is None else bias.dtype,
        kind,
        dropout_p,
        cols,
        x_dtype,
    )
    template, _, cuda_index = prepared(
        _norm_backward_plans,
        key,
        _norm_backward_plan,
        dy,
        dresidual_out,
        h,
        weight,
        bias,
        kind,
        dropout_p,
        cols,
        x_dtype,
    )
    a = call_struct(_NORM_BACKWARD, template, cuda_index)
    # views (or dense copies) kept alive until the call returns
    h_rows = as_rows(h, cols)[0]
    a.h = h_rows.data_ptr()
    if dropout_p > 0:
        a.seed, a.offset = seed_offset_values(seed_offset)
    dy_rows = as_rows(dy, cols)[0]
    dro_rows = as_rows(dresidual_out, cols)[0] if dresidual_out is not None else None
    return norm_backward_prepared(
        (a, template),
        dy_rows,
        dro_rows,
        h,
        stats,
        weight,
        bias,
        x_dtype,
        has_residual,
        want_x,
        want_residual,
        want_weight,
        want_bias,
        share_dx,
    )


def norm_backward_prepared(
    backward,
    dy,
    dresidual_out,
    h,
    stats,
    weight,
    bias,
    x_dtype,
    has_residual,
    want_x,
    want_residual,
    want_weight,
    want_bias,
    share_dx=False,
):
    """norm_backward from backward = (struct, its template), the struct
    filled but for the incoming gradients, the statistics, the weight, the
    outputs and the workspace: norm_forward's prepared backward (for dense
    dy and dresidual_out) or norm_backward's own. dy and dresidual_out have
    rows as the struct's row strides say."""
    a, template = backward
    shared = share_dx and has_residual and a.dropout_p == 0 and h.dtype is x_dtype and want_x
    dx = dense_like(h, x_dtype) if want_x and not shared else None
    dresidual = dense_like(h) if has_residual and (want_residual or shared) else None
    dweight = dense_like(weight) if weight is not None and want_weight else None
    dbias = dense_like(bias) if bias is not None and want_bias else None
    a.dy = dy_address = dy.data_ptr()
    if dresidual_out is not None:
        a.dresidual_out = dresidual_out.data_ptr()
    if dx is not None:
        a.dx = dx.data_ptr()
    if dresidual is not None:
        a.dresidual = dresidual.data_ptr()
    a.rstd = rstd = stats.data_ptr()
    if a.kind == LAYER:
        a.mean = rstd + a.rows * stats.itemsize
    if weight is not None:
        weight = weight.contiguous()  # the library reads cols dense elements
        a.weight = weight.data_ptr()
    if dweight is not None or dbias is not None:
        a.dweight, a.dbias = address(dweight), address(dbias)
        # the plan may turn on the operands' alignment: a coarse class of it
        # is part of the signature (the library alone knows the rule)
        classes = (
            dy_address % 256,
            a.h % 256,
            a.dresidual_out % 256,
            a.dx % 256,
            a.dresidual % 256,
            a.weight % 256,
        )  # 0: absent
        key = (template, dx is None, dresidual is None, dweight is None, dbias is None, classes)
        workspace = scratch(_norm_backward_workspaces, key, lib.fo_norm_backward_workspace_bytes, a, h)
        if workspace is not None:
            a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    status = lib.fo_norm_backward(a)
    if status or SYNC:
        finish(lib.fo_norm_backward, status, (a.device_type, a.device_index))
    if shared:
        dx = dresidual
    return dx, dresidual if want_residual else None, dweight, dbias


# autograd ------------------------------------------------------------------------------


def norm_save(ctx, x, residual, residual_out, stats, weight, bias, kind, dropout_p, cols, seed_offset):
    """Saves h (x, or residual_out, which the caller keeps anyway), the
    packed statistics and the parameters. The dropout mask is never stored:
    backward regenerates it from seed_offset (ints in eager mode, a tensor
    under torch.compile, which is saved as a tensor)."""
    h = residual_out if residual is not None else x
    if isinstance(seed_offset, torch.Tensor):
        ctx.save_for_backward(h, stats, weight, bias, seed_offset)
        seed_offset = None
    else:
        ctx.save_for_backward(h, stats, weight, bias)
    ctx.norm = (kind, dropout_p, cols, x.dtype, residual is not None, seed_offset)


def _norm_wants(ctx, weight, bias, has_residual):
    """(want_x, want_residual, want_weight, want_bias): the gradients to compute."""
    want_x, want_residual, want_weight, want_bias = ctx.needs_input_grad[:4]
    return (want_x, has_residual and want_residual, weight is not None and want_weight, bias is not None and want_bias)


def norm_grads(backward, ctx, dy, dresidual_out):
    """(dx, dresidual, dweight, dbias) for inputs (x, residual, weight,
    bias, ...), from backward(dy, dresidual_out, h, stats, weight, bias,
    kind, dropout_p, cols, seed_offset, x_dtype, has_residual, want_x,
    want_residual, want_weight, want_bias), which gives an unwanted gradient
    as None or as an empty tensor."""
    saved = ctx.saved_tensors
    h, stats, weight, bias = saved[:4]
    kind, dropout_p, cols, x_dtype, has_residual, seed_offset = ctx.norm
    if len(saved) > 4:
        seed_offset = saved[4]
    wanted = _norm_wants(ctx, weight, bias, has_residual)
    if dy is None:  # only residual_out was used
        dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
    grads = backward(
        dy,
        dresidual_out if has_residual else None,
        h,
        stats,
        weight,
        bias,
        kind,
        dropout_p,
        cols,
        seed_offset,
        x_dtype,
        has_residual,
        *wanted,
    )
    return tuple(g if want else None for g, want in zip(grads, wanted))


def _norm_backward_sharing_dx(*args):
    """The raw backward, with dx the very tensor dresidual is when their
    values agree (eager autograd may hand one tensor to two inputs; a
    registered op may not)."""
    return norm_backward(*args, share_dx=True)


class NormFunction(torch.autograd.Function):
    """apply(x, residual, weight, bias, config), config = (fn, kind, eps,
    dropout_p, normalized_shape): the fewest arguments, since apply costs
    0.2 us an argument. Returns y, or (y, residual_out) with a residual.

    Forward prepares backward's struct on the caller's thread, where
    Python runs faster than on autograd's CUDA thread; backward takes it
    when the gradients are dense and h is dense at the address forward saw
    (a saved-tensor hook may hand back another tensor)."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, config):
        fn, kind, eps, dropout_p, normalized_shape = config
        y, residual_out, stats, seed_offset, cols, ctx.prepared = norm_forward(
            fn,
            kind,
            x,
            residual,
            weight,
            bias,
            eps,
            dropout_p,
            normalized_shape,
            True,
            None,
            True,
        )
        norm_save(ctx, x, residual, residual_out, stats, weight, bias, kind, dropout_p, cols, seed_offset)
        if residual is None:
            return y
        # an unused output gets None, not a zero tensor: norm_grads makes
        # the zeros of an unused y itself
        ctx.set_materialize_grads(False)
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual_out=None):
        prepared = ctx.prepared
        if (
            prepared is not None
            and dy is not None
            and dy.is_contiguous()
            and (dresidual_out is None or dresidual_out.is_contiguous())
        ):
            h, stats, weight, bias = ctx.saved_tensors[:4]
            if h.data_ptr() == prepared[0].h and h.is_contiguous():
                _, _, _, x_dtype, has_residual, _ = ctx.norm
                wanted = _norm_wants(ctx, weight, bias, has_residual)
                grads = norm_backward_prepared(
                    prepared, dy, dresidual_out, h, stats, weight, bias, x_dtype, has_residual, *wanted, share_dx=True
                )
                return (*grads, None)  # None where not wanted
        return (*norm_grads(_norm_backward_sharing_dx, ctx, dy, dresidual_out), None)


apply_norm = eager_apply(NormFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::norm", mutates_args=())
    def norm_op(
        x: Tensor,
        residual: Optional[Tensor],
        weight: Optional[Tensor],
        bias: Optional[Tensor],
        kind: int,
        eps: float,
        dropout_p: float,
        normalized_shape: List[int],
        seed_offset: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor, Tensor]:
        y, residual_out, stats, _, _, _ = norm_forward(
            "fused_ops_py::norm",
            kind,
            x,
            residual,
            weight,
            bias,
            eps,
            dropout_p,
            tuple(normalized_shape),
            True,
            seed_offset,
        )
        return y, or_empty(residual_out, x), stats

    @norm_op.register_fake
    def _(x, residual, weight, bias, kind, eps, dropout_p, normalized_shape, seed_offset):
        cols = math.prod(normalized_shape)
        rows = x.numel() // cols if cols else math.prod(x.shape[: x.dim() - len(normalized_shape)])
        stats = x.new_empty(rows if kind == RMS else 2 * rows, dtype=stats_dtype(x.dtype))
        residual_out = residual.new_empty(residual.shape) if residual is not None else empty(x)
        return x.new_empty(x.shape), residual_out, stats

    @custom_op("fused_ops_py::norm_backward", mutates_args=())
    def norm_backward_op(
        dy: Tensor,
        dresidual_out: Optional[Tensor],
        h: Tensor,
        stats: Tensor,
        weight: Optional[Tensor],
        bias: Optional[Tensor],
        kind: int,
        dropout_p: float,
        cols: int,
        seed_offset: Optional[Tensor],
        x_dtype: torch.dtype,
        has_residual: bool,
        want_x: bool,
        want_residual: bool,
        want_weight: bool,
        want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        grads = norm_backward(
            dy,
            dresidual_out,
            h,
            stats,
            weight,
            bias,
            kind,
            dropout_p,
            cols,
            seed_offset,
            x_dtype,
            has_residual,
            want_x,
            want_residual,
            want_weight,
            want_bias,
        )
        return tuple(or_empty(g, h) for g in grads)

    @norm_backward_op.register_fake
    def _(
        dy,
        dresidual_out,
        h,
        stats,
        weight,
        bias,
        kind,
        dropout_p,
        cols,
        seed_offset,
        x_dtype,
        has_residual,
        want_x,
        want_residual,
        want_weight,
        want_bias,
    ):
        return (
            h.new_empty(h.shape, dtype=x_dtype) if want_x else empty(h),
            h.new_empty(h.shape) if want_residual else empty(h),
            weight.new_empty(weight.shape) if want_weight else empty(h),
            bias.new_empty(bias.shape) if want_bias else empty(h),
        )

    def _norm_setup(ctx, inputs, output):
        x, residual, weight, bias, kind, _, dropout_p, normalized_shape, seed_offset = inputs
        _, residual_out, stats = output
        norm_save(
            ctx,
            x,
            residual,
            residual_out,
            stats,
            weight,
            bias,
            kind,
            dropout_p,
            math.prod(normalized_shape),
            seed_offset,
        )

    def _norm_grad(ctx, dy, dresidual_out, _dstats):
        grads = norm_grads(torch.ops.fused_ops_py.norm_backward, ctx, dy, dresidual_out)
        return (*grads, None, None, None, None, None)

    norm_op.register_autograd(_norm_grad, setup_context=_norm_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


# torch's RMSNorm default eps, torch.finfo(dtype).eps
_DEFAULT_EPS = {dtype: torch.finfo(dtype).eps for dtype in DTYPE_CODES}


def _norm(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """(y, residual_out or None)."""
    if eps is None:  # a non-tensor x or an unsupported dtype: the checks name it
        eps = _DEFAULT_EPS[x.dtype] if isinstance(x, torch.Tensor) and x.dtype in _DEFAULT_EPS else None
    if compiling():
        shape = check_norm(fn, x, residual, weight, bias, normalized_shape)
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
    return norm_forward(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, False)[:2]


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
        return torch.full(
            tuple(shape) if not isinstance(shape, int) else (shape,),
            float(offset),
            dtype=torch.float32,
            device=x.device,
        )
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
