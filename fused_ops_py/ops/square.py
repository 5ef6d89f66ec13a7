"""x * x and its gradient 2 x dy (fo_square_*)."""

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like
from .._core import (
    AVAILABLE,
    call_struct,
    compiling,
    cuda_index,
    custom_op,
    eager_apply,
    new_struct,
    prepared,
    records_grad,
)
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------


# square: backward needs x (dx = 2 x dy), so forward saves x itself

_SQUARE_FORWARD = ffi.typeof("fo_square_forward_args *")
_SQUARE_BACKWARD = ffi.typeof("fo_square_backward_args *")


def _square_plan(x):
    """(forward template, x is used as it is, CUDA index, free forward
    structs) for a signature."""
    _, rows, cols, x_stride = as_rows(x)
    template = new_struct(
        _SQUARE_FORWARD,
        (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        x_row_stride=x_stride,
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[x.dtype],
    )
    return template, x.is_contiguous(), cuda_index(x), []


_square_plans = {}


def square_forward(x):
    template, dense, cuda_index, free = prepared(
        _square_plans, (x.shape, x.stride(), x.dtype, x.device), _square_plan, x
    )
    a = call_struct(_SQUARE_FORWARD, template, cuda_index, free)
    y = dense_like(x)
    if not dense:  # a view, or a copy where no view has dense rows: kept alive until the call returns
        x = as_rows(x)[0]
    a.y, a.x = y.data_ptr(), x.data_ptr()
    status = lib.fo_square_forward(a)
    if status or SYNC:
        finish(lib.fo_square_forward, status, (a.device_type, a.device_index))
    free.append(a)
    return y


def _square_backward_plan(dy, x):
    """(backward template, dy and x are used as they are, CUDA index, free
    backward structs) for a signature."""
    _, rows, cols, x_stride = as_rows(x)
    template = new_struct(
        _SQUARE_BACKWARD,
        (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        dy_row_stride=as_rows(dy)[3],
        x_row_stride=x_stride,
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[x.dtype],
    )
    return template, dy.is_contiguous() and x.is_contiguous(), cuda_index(x), []


_square_backward_plans = {}


def square_backward(dy, x):
    template, dense, cuda_index, free = prepared(
        _square_backward_plans,
        (dy.shape, dy.stride(), x.shape, x.stride(), x.dtype, x.device),
        _square_backward_plan,
        dy,
        x,
    )
    a = call_struct(_SQUARE_BACKWARD, template, cuda_index, free)
    dx = dense_like(x)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        dy, x = as_rows(dy)[0], as_rows(x)[0]
    a.dx, a.dy, a.x = dx.data_ptr(), dy.data_ptr(), x.data_ptr()
    status = lib.fo_square_backward(a)
    if status or SYNC:
        finish(lib.fo_square_backward, status, (a.device_type, a.device_index))
    free.append(a)
    return dx


# autograd ------------------------------------------------------------------------------


def square_save(ctx, x):
    ctx.save_for_backward(x)


def square_grads(backward, ctx, dy):
    (x,) = ctx.saved_tensors
    return backward(dy, x)


class SquareFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        square_save(ctx, x)
        return square_forward(x)

    @staticmethod
    def backward(ctx, dy):
        return square_grads(square_backward, ctx, dy)


apply_square = eager_apply(SquareFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::square", mutates_args=())
    def square_op(x: Tensor) -> Tensor:
        return square_forward(x)

    @square_op.register_fake
    def _(x):
        return x.new_empty(x.shape)

    @custom_op("fused_ops_py::square_backward", mutates_args=())
    def square_backward_op(dy: Tensor, x: Tensor) -> Tensor:
        return square_backward(dy, x)

    @square_backward_op.register_fake
    def _(dy, x):
        return x.new_empty(x.shape)

    def _square_setup(ctx, inputs, output):
        square_save(ctx, inputs[0])

    def _square_grad(ctx, dy):
        return square_grads(torch.ops.fused_ops_py.square_backward, ctx, dy)

    square_op.register_autograd(_square_grad, setup_context=_square_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def square(x):
    """x * x, elementwise."""
    _args.check_tensor("square", "x", x)
    if compiling():
        return torch.ops.fused_ops_py.square(x)
    if records_grad(x):
        return apply_square(x)
    return square_forward(x)
