"""The sum of all elements, in a fixed order (fo_reduce_sum)."""

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES
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
    scratch,
)
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------


_REDUCE_SUM = ffi.typeof("fo_reduce_sum_args *")


def _reduce_sum_plan(x):
    """(template struct, CUDA index, free structs) for a signature."""
    template = new_struct(
        _REDUCE_SUM,
        (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0)),
        numel=x.numel(),
        dtype=DTYPE_CODES[x.dtype],
    )
    return template, cuda_index(x), []


_reduce_sum_plans = {}
# the workspace depends on the device, numel and dtype alone: asked once a plan
_reduce_sum_workspaces = {}


def reduce_sum_forward(x):
    template, cuda_index, free = prepared(_reduce_sum_plans, (x.numel(), x.dtype, x.device), _reduce_sum_plan, x)
    a = call_struct(_REDUCE_SUM, template, cuda_index, free)
    dense = x.contiguous()
    out = x.new_empty(())
    a.out, a.x = out.data_ptr(), dense.data_ptr()
    workspace = scratch(_reduce_sum_workspaces, template, lib.fo_reduce_sum_workspace_bytes, a, x)
    if workspace is not None:
        a.workspace, a.workspace_bytes = workspace.data_ptr(), workspace.numel()
    status = lib.fo_reduce_sum(a)
    if status or SYNC:
        finish(lib.fo_reduce_sum, status, (a.device_type, a.device_index))
    free.append(a)
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
