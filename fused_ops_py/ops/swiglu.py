"""silu(gate) * up, the gated MLP of Llama-style models (fo_swiglu_*)."""

from typing import Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like, device_args
from .._core import (
    AVAILABLE,
    address,
    compiling,
    cuda_index,
    custom_op,
    eager_apply,
    empty,
    or_empty,
    prepared,
    records_grad,
)
from .._ffi import SYNC, finish, lib

# the raw calls -------------------------------------------------------------------------


# swiglu: backward needs gate and up, so forward saves those (the caller's own
# tensors: no extra memory) and not its output


def check_swiglu(fn, gate, up):
    _args.check_tensor(fn, "gate", gate)
    _args.check_companion(fn, "up", up, gate, "gate")
    if up.dtype != gate.dtype:
        raise TypeError(f"{fn}: up has dtype {up.dtype} but gate has dtype {gate.dtype}; they must match")
    _args.check_same_shape(fn, "up", up, gate, "gate")


def _swiglu_plan(fn, gate, up):
    """(rows, cols, gate's and up's row strides, dtype code, gate and up are
    used as they are, CUDA index) for a signature."""
    check_swiglu(fn, gate, up)
    _, rows, cols, gate_stride = as_rows(gate)
    return (
        rows,
        cols,
        gate_stride,
        as_rows(up)[3],
        DTYPE_CODES[gate.dtype],
        gate.is_contiguous() and up.is_contiguous(),
        cuda_index(gate),
    )


_swiglu_plans = {}


def swiglu_forward(fn, gate, up):
    try:
        key = (gate.shape, gate.stride(), gate.dtype, gate.device, up.shape, up.stride(), up.dtype, up.device)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    rows, cols, gate_stride, up_stride, code, dense, cuda_index = prepared(
        _swiglu_plans, key, _swiglu_plan, fn, gate, up
    )
    y = dense_like(gate)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        gate, up = as_rows(gate)[0], as_rows(up)[0]
    if cuda_index is None:
        _args.sync_cpu_threads()
        device = (lib.FO_DEVICE_CPU, 0, 0)
    else:
        device = (lib.FO_DEVICE_CUDA, cuda_index, _args.cuda_stream(cuda_index))
    status = lib.fo_swiglu_forward(
        *device, y.data_ptr(), gate.data_ptr(), gate_stride, up.data_ptr(), up_stride, rows, cols, code
    )
    if status or SYNC:
        finish(lib.fo_swiglu_forward, status, device)
    return y


def swiglu_backward(dy, gate, up, want_gate, want_up, over_inputs=False):
    """(dgate or None, dup or None). over_inputs: the gradients are written
    over gate and up where they are dense (the library allows it), for a
    caller that owns them and needs them no more: no new memory."""
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    dy_view, _, _, dy_stride = as_rows(dy)
    over_inputs = over_inputs and gate.is_contiguous() and up.is_contiguous()
    dgate = (gate if over_inputs else dense_like(gate)) if want_gate else None
    dup = (up if over_inputs else dense_like(gate)) if want_up else None
    device = device_args(gate)
    status = lib.fo_swiglu_backward(
        *device,
        address(dgate),
        address(dup),
        dy_view.data_ptr(),
        dy_stride,
        gate_view.data_ptr(),
        gate_stride,
        up_view.data_ptr(),
        up_stride,
        rows,
        cols,
        DTYPE_CODES[gate.dtype],
    )
    if status or SYNC:
        finish(lib.fo_swiglu_backward, status, device)
    return dgate, dup


# autograd ------------------------------------------------------------------------------


def swiglu_save(ctx, gate, up):
    ctx.save_for_backward(gate, up)


def swiglu_grads(backward, ctx, dy):
    """(dgate, dup) from backward(dy, gate, up, want_gate, want_up)."""
    gate, up = ctx.saved_tensors
    want_gate, want_up = ctx.needs_input_grad[:2]
    dgate, dup = backward(dy, gate, up, want_gate, want_up)
    return dgate if want_gate else None, dup if want_up else None


def _swiglu_backward_over_inputs(*args):
    return swiglu_backward(*args, over_inputs=True)


class SwiGLUFunction(torch.autograd.Function):
    """apply(gate, up, over_inputs): with over_inputs (gate and up are the
    caller's temporaries, used by nothing else), backward writes the
    gradients over the saved gate and up."""

    @staticmethod
    def forward(ctx, gate, up, over_inputs):
        swiglu_save(ctx, gate, up)
        ctx.over_inputs = over_inputs
        return swiglu_forward("fused_swiglu", gate, up)

    @staticmethod
    def backward(ctx, dy):
        backward = _swiglu_backward_over_inputs if ctx.over_inputs else swiglu_backward
        return (*swiglu_grads(backward, ctx, dy), None)


apply_swiglu = eager_apply(SwiGLUFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::swiglu", mutates_args=())
    def swiglu_op(gate: Tensor, up: Tensor) -> Tensor:
        return swiglu_forward("fused_ops_py::swiglu", gate, up)

    @swiglu_op.register_fake
    def _(gate, up):
        return gate.new_empty(gate.shape)

    @custom_op("fused_ops_py::swiglu_backward", mutates_args=())
    def swiglu_backward_op(
        dy: Tensor, gate: Tensor, up: Tensor, want_gate: bool, want_up: bool
    ) -> Tuple[Tensor, Tensor]:
        dgate, dup = swiglu_backward(dy, gate, up, want_gate, want_up)
        return or_empty(dgate, gate), or_empty(dup, gate)

    @swiglu_backward_op.register_fake
    def _(dy, gate, up, want_gate, want_up):
        return (
            gate.new_empty(gate.shape) if want_gate else empty(gate),
            gate.new_empty(gate.shape) if want_up else empty(gate),
        )

    def _swiglu_setup(ctx, inputs, output):
        swiglu_save(ctx, *inputs)

    def _swiglu_grad(ctx, dy):
        return swiglu_grads(torch.ops.fused_ops_py.swiglu_backward, ctx, dy)

    swiglu_op.register_autograd(_swiglu_grad, setup_context=_swiglu_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_swiglu(gate, up):
    """silu(gate) * up, elementwise (the gated MLP of Llama-style models);
    gate and up have one shape and dtype. Gradients flow to both."""
    return _swiglu(gate, up, False)


def swiglu_over_inputs(gate, up):
    """fused_swiglu for a caller whose gate and up are temporaries that
    nothing else reads (patch's MLPs): backward writes their gradients over
    them instead of allocating two more tensors of their size."""
    return _swiglu(gate, up, True)


def _swiglu(gate, up, over_inputs):
    fn = "fused_swiglu"
    if compiling():  # (a registered op may not write over its inputs)
        check_swiglu(fn, gate, up)
        return torch.ops.fused_ops_py.swiglu(gate, up)
    try:
        wants_grad = records_grad(gate, up)
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_swiglu(gate, up, over_inputs)
    return swiglu_forward(fn, gate, up)
