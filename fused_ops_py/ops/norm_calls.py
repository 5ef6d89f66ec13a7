"""The raw calls of the norms (fo_norm_*): tensors in, outputs allocated,
one foreign call, no autograd; a signature's checks and argument struct made
once. ops/norm.py builds the autograd, the compile op and the public
functions on them (the norm family's raw calls outgrow one file)."""

import math

import torch

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like, device_args
from .._core import (
    address,
    call_struct,
    cuda_index,
    new_struct,
    prepared,
    scratch,
    stats_dtype,
)
from .._ffi import SYNC, ffi, finish, lib
from .norm_dropout import dropout_seed_offset, seed_offset_values
from .quantize_fp8 import check_fp8_options, fp8_fields, fp8_output

LAYER, RMS = lib.FO_NORM_LAYER, lib.FO_NORM_RMS

_NORM_FORWARD = ffi.typeof("fo_norm_forward_args *")
_NORM_BACKWARD = ffi.typeof("fo_norm_backward_args *")


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


def _norm_fp8_plan(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, recipe, dtype, transpose):
    check_fp8_options(fn, recipe, dtype, transpose)
    plan = _norm_forward_plan(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape)
    if plan[2] != x.shape[-1]:
        raise ValueError(
            f"{fn}: fp8={recipe!r} takes normalized_shape of x's last dimension alone, got {normalized_shape}"
        )
    for name, value in fp8_fields(recipe, dtype).items():
        setattr(plan[0][0].fp8, name, value)
    return plan


_norm_fp8_plans = {}
_norm_fp8_workspaces = {}


def norm_fp8_forward(
    fn,
    kind,
    x,
    residual,
    weight,
    bias,
    eps,
    dropout_p,
    normalized_shape,
    recipe,
    dtype,
    transpose,
    seed_offset=None,
):
    """norm_forward with y in FP8, the bf16 (or other) y never written, and
    no statistics: ((y or None, scale, y_t or None), residual_out or None)."""
    try:
        if type(eps) is not float or type(dropout_p) is not float:
            raise TypeError
        key = (kind, x.shape, x.stride(), x.dtype, x.device, eps, dropout_p, normalized_shape)
        key += tuple(None if t is None else (t.shape, t.stride(), t.dtype, t.device) for t in (weight, bias, residual))
        key += (recipe, dtype, transpose)
    except (AttributeError, TypeError):  # not tensors, or eps and dropout_p not floats
        key = None
    args = (fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, recipe, dtype, transpose)
    template, rows, cols, dense, index, _, free = prepared(_norm_fp8_plans, key, _norm_fp8_plan, *args)
    a = call_struct(_NORM_FORWARD, template, index, free[0])
    y, scale, y_t, amax = fp8_output(a.fp8, x, recipe, dtype, transpose)
    x_rows = x if dense else as_rows(x, cols)[0]  # a view or copy, kept alive until the call returns
    a.x = x_rows.data_ptr()
    if weight is not None:
        weight = weight.contiguous()  # the library reads parameters as cols dense elements
        a.weight = weight.data_ptr()
    if bias is not None:
        bias = bias.contiguous()
        a.bias = bias.data_ptr()
    residual_out = None
    if residual is not None:
        residual_rows = residual if dense else as_rows(residual, cols)[0]
        residual_out = dense_like(residual)
        a.residual_out, a.residual = residual_out.data_ptr(), residual_rows.data_ptr()
    if dropout_p > 0:
        if seed_offset is None:
            seed_offset = dropout_seed_offset(x, rows, cols)
        a.seed, a.offset = seed_offset_values(seed_offset)
    workspace = scratch(_norm_fp8_workspaces, key, lib.fo_norm_forward_workspace_bytes, a, x)
    a.workspace, a.workspace_bytes = (workspace.data_ptr(), workspace.numel()) if workspace is not None else (0, 0)
    status = lib.fo_norm_forward(a)
    if status or SYNC:
        finish(lib.fo_norm_forward, status, (a.device_type, a.device_index))
    free[0].append(a)
    return (y, scale, y_t), residual_out


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
