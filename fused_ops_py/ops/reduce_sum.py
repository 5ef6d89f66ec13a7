"""The sum of all elements, in a fixed order (fo_reduce_sum)."""

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, device_args
from .._core import AVAILABLE, BYTES, address, compiling, custom_op, eager_apply, records_grad, remember
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------


_reduce_sum_workspaces = {}


def _reduce_sum_workspace_bytes(device, numel, code):
    """The library's answer for (device type, numel, dtype), which is all it
    depends on: asked once a signature."""
    key = (device[0], numel, code)
    nbytes = _reduce_sum_workspaces.get(key)
    if nbytes is None:
        answer = ffi.new(BYTES)
        status = lib.fo_reduce_sum_workspace_bytes(device[0], numel, code, answer)
        if status:
            finish(lib.fo_reduce_sum_workspace_bytes, status, device)
        nbytes = remember(_reduce_sum_workspaces, key, answer[0])
    return nbytes


def reduce_sum_forward(x):
    dense = x.contiguous()
    out = x.new_empty(())
    device = device_args(x)
    code, numel = DTYPE_CODES[x.dtype], x.numel()
    nbytes = _reduce_sum_workspace_bytes(device, numel, code)
    workspace = x.new_empty(nbytes, dtype=torch.uint8) if nbytes else None
    status = lib.fo_reduce_sum(*device, out.data_ptr(), address(workspace), nbytes, dense.data_ptr(), numel, code)
    if status or SYNC:
        finish(lib.fo_reduce_sum, status, device)
    return out


# autograd ------------------------------------------------------------------------------


def reduce_sum_save(ctx, x):
    ctx.input_shape = x.shape


def reduce_sum_grads(ctx, dy):
    # every element gets dy: an expanded view, as torch.sum's backward
    return dy.expand(ctx.input_shape)


class ReduceSumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        reduce_sum_save(ctx, x)
        return reduce_sum_forward(x)

    @staticmethod
    def backward(ctx, dy):
        return reduce_sum_grads(ctx, dy)


apply_reduce_sum = eager_apply(ReduceSumFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::reduce_sum", mutates_args=())
    def reduce_sum_op(x: Tensor) -> Tensor:
        return reduce_sum_forward(x)

    @reduce_sum_op.register_fake
    def _(x):
        return x.new_empty(())

    def _reduce_sum_setup(ctx, inputs, output):
        reduce_sum_save(ctx, inputs[0])

    reduce_sum_op.register_autograd(reduce_sum_grads, setup_context=_reduce_sum_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def reduce_sum(x):
    """The sum of all elements as a 0-d tensor of x's dtype, accumulated in
    fp32 (fp64 for fp64) in a fixed order: the same bits on every run."""
    _args.check_tensor("reduce_sum", "x", x)
    if compiling():
        return torch.ops.fused_ops_py.reduce_sum(x)
    if records_grad(x):
        return apply_reduce_sum(x)
    return reduce_sum_forward(x)
