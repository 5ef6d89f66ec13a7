"""relu(x * scale + bias) and relu (fo_bias_scale_relu_*): forward writes a
1-bit mask for backward."""

import math
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like, device_args
from .._core import (
    AVAILABLE,
    call_struct,
    compiling,
    cuda_index,
    custom_op,
    eager_apply,
    empty,
    new_struct,
    or_empty,
    prepared,
    records_grad,
    scratch,
)
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------


_RELU_FORWARD = ffi.typeof("fo_bias_scale_relu_forward_args *")
_RELU_BACKWARD = ffi.typeof("fo_bias_scale_relu_backward_args *")


#
# Forward saves a 1-bit-per-element mask (y > 0) rather than x or y: backward
# reads dy and 1/8 byte an element instead of dy and a whole element.


def check_bias_scale_relu(fn, x, bias, scale):
    """What only Python can see; returns scale as a float."""
    _args.check_tensor(fn, "x", x)
    scale = _args.check_number(fn, "scale", scale)
    if bias is not None:
        _args.check_companion(fn, "bias", bias, x)
        if x.dim() == 0:
            raise ValueError(f"{fn}: x is 0-d; the bias is broadcast over a last dimension")
        if bias.shape != x.shape[-1:]:
            raise ValueError(
                f"{fn}: bias has shape {tuple(bias.shape)} but must be ({x.shape[-1]},), "
                f"the last dimension of x (x has shape {tuple(x.shape)})"
            )
    return scale


def _bias_scale_relu_forward_plan(fn, x, bias, scale):
    """(template struct, rows, cols, x is used as it is, CUDA index, backward
    template, free structs) for a signature."""
    scale = check_bias_scale_relu(fn, x, bias, scale)
    _, rows, cols, x_stride = as_rows(x)
    code = DTYPE_CODES[x.dtype]
    template = new_struct(
        _RELU_FORWARD,
        (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        x_row_stride=x_stride,
        rows=rows,
        cols=cols,
        dtype=code,
        bias_dtype=DTYPE_CODES[bias.dtype] if bias is not None else code,
        scale=scale,
    )
    # then the backward's template for a dense dy, and the free structs of
    # calls without and with a mask
    return template, rows, cols, x.is_contiguous(), cuda_index(x), [None], ([], [])


_bias_scale_relu_forward_plans = {}


def bias_scale_relu_forward(fn, x, bias, scale, want_mask, prepare_backward=False):
    """(y, mask or None, backward or None): with prepare_backward (and
    want_mask), the backward's struct for a dense dy
    (bias_scale_relu_backward_prepared)."""
    try:
        if type(scale) is not float:  # True == 1 == 1.0 as keys
            raise TypeError
        key = (
            x.shape,
            x.stride(),
            x.dtype,
            x.device,
            scale,
            None if bias is None else (bias.shape, bias.dtype, bias.device),
        )
    except (AttributeError, TypeError):  # not tensors, or scale not a float
        key = None
    template, rows, cols, dense, cuda_index, backward_template, free = prepared(
        _bias_scale_relu_forward_plans,
        key,
        _bias_scale_relu_forward_plan,
        fn,
        x,
        bias,
        scale,
    )
    free = free[1 if want_mask else 0]
    a = call_struct(_RELU_FORWARD, template, cuda_index, free)
    if dense:
        y = torch.empty_like(x)
        x_rows = x
    else:  # a view, or a copy where no view has dense rows: kept alive until the call returns
        y = dense_like(x)
        x_rows = as_rows(x)[0]
    a.x, a.y = x_rows.data_ptr(), y.data_ptr()
    if bias is not None:
        bias = bias.contiguous()  # the library reads cols dense elements
        a.bias = bias.data_ptr()
    mask = None
    if want_mask:
        mask = x.new_empty(rows, (cols + 7) // 8, dtype=torch.uint8)
        a.mask = mask.data_ptr()
    status = lib.fo_bias_scale_relu_forward(a)
    if status or SYNC:
        finish(lib.fo_bias_scale_relu_forward, status, (a.device_type, a.device_index))
    backward = None
    if prepare_backward:
        if backward_template[0] is None:  # y stands in for dy: dense, of its shape and dtype
            bias_dtype = bias.dtype if bias is not None else None
            backward_template[0] = _bias_scale_relu_backward_plan(y, a.scale, bias_dtype)[0]
        template = backward_template[0]
        b = ffi.new(_RELU_BACKWARD, template[0])
        b.stream = a.stream  # autograd runs backward on the forward's stream
        b.mask = a.mask
        backward = (b, template)
    free.append(a)
    return y, mask, backward


def _bias_scale_relu_backward_plan(dy, scale, bias_dtype):
    """(template struct, cols, CUDA index) for a backward signature."""
    _, rows, cols, dy_stride = as_rows(dy)
    code = DTYPE_CODES[dy.dtype]
    template = new_struct(
        _RELU_BACKWARD,
        device_args(dy)[:2],
        dy_row_stride=dy_stride,
        rows=rows,
        cols=cols,
        dtype=code,
        bias_dtype=DTYPE_CODES[bias_dtype] if bias_dtype is not None else code,
        scale=scale,
    )
    return template, cols, cuda_index(dy)


_bias_scale_relu_backward_plans = {}
_bias_scale_relu_backward_workspaces = {}


def bias_scale_relu_backward(dy, mask, scale, want_dx, bias_dtype):
    """(dx or None, dbias or None); bias_dtype None means no bias gradient."""
    key = (dy.shape, dy.stride(), dy.dtype, dy.device, scale, bias_dtype)
    template, _, cuda_index = prepared(
        _bias_scale_relu_backward_plans, key, _bias_scale_relu_backward_plan, dy, scale, bias_dtype
    )
    a = call_struct(_RELU_BACKWARD, template, cuda_index)
    a.mask = mask.data_ptr()
    dy_rows = as_rows(dy)[0]  # a view, or a dense copy kept alive until the call returns
    return bias_scale_relu_backward_prepared((a, template), dy, dy_rows, want_dx, bias_dtype)


def bias_scale_relu_backward_prepared(backward, dy, dy_rows, want_dx, bias_dtype):
    """bias_scale_relu_backward from backward = (struct, its template), the
    struct filled but for dy, the outputs and the workspace:
    bias_scale_relu_forward's prepared backward (for a dense dy) or
    bias_scale_relu_backward's own. dy_rows is dy with rows as the struct
    says (dy itself where dense)."""
    a, template = backward
    a.dy = dy_rows.data_ptr()
    dx = dbias = None
    if want_dx:
        dx = dense_like(dy)
        a.dx = dx.data_ptr()
    if bias_dtype is not None:
        dbias = dy.new_empty(a.cols, dtype=bias_dtype)
        a.dbias = dbias.data_ptr()
        workspace = scratch(
            _bias_scale_relu_backward_workspaces, template, lib.fo_bias_scale_relu_backward_workspace_bytes, a, dy
        )
        if workspace is not None:
            a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    status = lib.fo_bias_scale_relu_backward(a)
    if status or SYNC:
        finish(lib.fo_bias_scale_relu_backward, status, (a.device_type, a.device_index))
    return dx, dbias


# autograd ------------------------------------------------------------------------------


def bias_scale_relu_save(ctx, bias, scale, mask):
    ctx.save_for_backward(mask)
    ctx.bias_scale_relu = (scale, None if bias is None else bias.dtype)


def _bias_scale_relu_wants(ctx):
    """(want_dx, the bias's dtype where its gradient is wanted, else None)."""
    _, bias_dtype = ctx.bias_scale_relu
    wants = ctx.needs_input_grad
    return wants[0], bias_dtype if bias_dtype is not None and wants[1] else None


def bias_scale_relu_grads(backward, ctx, dy):
    """(dx, dbias) from backward(dy, mask, scale, want_dx, bias_dtype or None)."""
    (mask,) = ctx.saved_tensors
    want_dx, bias_dtype = _bias_scale_relu_wants(ctx)
    dx, dbias = backward(dy, mask, ctx.bias_scale_relu[0], want_dx, bias_dtype)
    return dx if want_dx else None, dbias if bias_dtype is not None else None


class BiasScaleReLUFunction(torch.autograd.Function):
    """apply(x, bias, (fn, scale)). Forward prepares backward's struct, as
    NormFunction's does; backward takes it for a dense dy and the mask
    forward saw."""

    @staticmethod
    def forward(ctx, x, bias, config):
        fn, scale = config
        y, mask, ctx.prepared = bias_scale_relu_forward(fn, x, bias, scale, True, True)
        bias_scale_relu_save(ctx, bias, scale, mask)
        return y

    @staticmethod
    def backward(ctx, dy):
        if dy.is_contiguous():
            (mask,) = ctx.saved_tensors
            if mask.data_ptr() == ctx.prepared[0].mask:
                want_dx, bias_dtype = _bias_scale_relu_wants(ctx)
                dx, dbias = bias_scale_relu_backward_prepared(ctx.prepared, dy, dy, want_dx, bias_dtype)
                return dx, dbias, None  # None where not wanted
        return (*bias_scale_relu_grads(bias_scale_relu_backward, ctx, dy), None)


apply_bias_scale_relu = eager_apply(BiasScaleReLUFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::bias_scale_relu", mutates_args=())
    def bias_scale_relu_op(x: Tensor, bias: Optional[Tensor], scale: float, want_mask: bool) -> Tuple[Tensor, Tensor]:
        y, mask, _ = bias_scale_relu_forward("fused_ops_py::bias_scale_relu", x, bias, scale, want_mask)
        return y, mask if mask is not None else empty(x).to(torch.uint8)

    @bias_scale_relu_op.register_fake
    def _(x, bias, scale, want_mask):
        cols = x.shape[-1] if x.dim() else 1
        rows = x.numel() // cols if cols else math.prod(x.shape[:-1])
        mask_shape = (rows, (cols + 7) // 8) if want_mask else (0,)
        return x.new_empty(x.shape), x.new_empty(mask_shape, dtype=torch.uint8)

    @custom_op("fused_ops_py::bias_scale_relu_backward", mutates_args=())
    def bias_scale_relu_backward_op(
        dy: Tensor, mask: Tensor, scale: float, want_dx: bool, bias_dtype: Optional[torch.dtype]
    ) -> Tuple[Tensor, Tensor]:
        dx, dbias = bias_scale_relu_backward(dy, mask, scale, want_dx, bias_dtype)
        return or_empty(dx, dy), or_empty(dbias, dy)

    @bias_scale_relu_backward_op.register_fake
    def _(dy, mask, scale, want_dx, bias_dtype):
        dx = dy.new_empty(dy.shape) if want_dx else empty(dy)
        dbias = dy.new_empty(dy.shape[-1:], dtype=bias_dtype) if bias_dtype is not None else empty(dy)
        return dx, dbias

    def _bias_scale_relu_setup(ctx, inputs, output):
        _, bias, scale, _ = inputs
        bias_scale_relu_save(ctx, bias, scale, output[1])

    def _bias_scale_relu_grad(ctx, dy, _dmask):
        dx, dbias = bias_scale_relu_grads(torch.ops.fused_ops_py.bias_scale_relu_backward, ctx, dy)
        return dx, dbias, None, None

    bias_scale_relu_op.register_autograd(_bias_scale_relu_grad, setup_context=_bias_scale_relu_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def _bias_scale_relu(fn, x, bias, scale):
    if compiling():
        scale = check_bias_scale_relu(fn, x, bias, scale)
        return torch.ops.fused_ops_py.bias_scale_relu(x, bias, scale, records_grad(x, bias))[0]
    try:
        wants_grad = records_grad(x, bias)
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_bias_scale_relu(x, bias, (fn, scale))
    return bias_scale_relu_forward(fn, x, bias, scale, want_mask=False)[0]


def fused_bias_scale_relu(x, bias, scale=1.0):
    """relu(x * scale + bias), with bias of shape [N] broadcast over the last
    dimension N of x. Gradients flow to x and bias."""
    return _bias_scale_relu("fused_bias_scale_relu", x, bias, scale)


def relu(x):
    """max(x, 0), elementwise; NaN stays NaN as in torch.relu."""
    return _bias_scale_relu("relu", x, None, 1.0)
