"""x * x and its gradient 2 x dy (fo_square_*)."""

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like, device_args
from .._core import AVAILABLE, compiling, custom_op, eager_apply, records_grad
from .._ffi import SYNC, finish, lib

# the raw calls -------------------------------------------------------------------------


# square: backward needs x (dx = 2 x dy), so forward saves x itself


def square_forward(x):
    x_view, rows, cols, x_stride = as_rows(x)
    y = dense_like(x)
    device = device_args(x)
    status = lib.fo_square_forward(*device, y.data_ptr(), x_view.data_ptr(), x_stride, rows, cols, DTYPE_CODES[x.dtype])
    if status or SYNC:
        finish(lib.fo_square_forward, status, device)
    return y


def square_backward(dy, x):
    x_view, rows, cols, x_stride = as_rows(x)
    dy_view, _, _, dy_stride = as_rows(dy)
    dx = dense_like(x)
    device = device_args(x)
    status = lib.fo_square_backward(
        *device,
        dx.data_ptr(),
        dy_view.data_ptr(),
        dy_stride,
        x_view.data_ptr(),
        x_stride,
        rows,
        cols,
        DTYPE_CODES[x.dtype],
    )
    if status or SYNC:
        finish(lib.fo_square_backward, status, device)
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
