"""silu(gate) * up, the gated MLP of Llama-style models (fo_swiglu_*)."""

from typing import Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like
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
    records_grad,
)
from .._ffi import SYNC, ffi, finish, lib
from .quantize_fp8 import (
    TRANSPOSES,
    check_fp8_options,
    fake_fp8_output,
    fp8_fields,
    fp8_op_output,
    fp8_output,
    fp8_result,
)

# the raw calls -------------------------------------------------------------------------


# swiglu: backward needs gate and up, so forward saves those (the caller's own
# tensors: no extra memory) and not its output

_SWIGLU_FORWARD = ffi.typeof("fo_swiglu_forward_args *")
_SWIGLU_BACKWARD = ffi.typeof("fo_swiglu_backward_args *")


def check_swiglu(fn, gate, up):
    _args.check_tensor(fn, "gate", gate)
    _args.check_companion(fn, "up", up, gate, "gate")
    if up.dtype != gate.dtype:
        raise TypeError(f"{fn}: up has dtype {up.dtype} but gate has dtype {gate.dtype}; they must match")
    _args.check_same_shape(fn, "up", up, gate, "gate")


def _swiglu_plan(fn, gate, up):
    """(forward template, gate and up are used as they are, CUDA index, free
    forward structs) for a signature."""
    check_swiglu(fn, gate, up)
    _, rows, cols, gate_stride = as_rows(gate)
    template = new_struct(
        _SWIGLU_FORWARD,
        (lib.FO_DEVICE_CUDA if gate.is_cuda else lib.FO_DEVICE_CPU, max(gate.get_device(), 0)),
        gate_row_stride=gate_stride,
        up_row_stride=as_rows(up)[3],
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[gate.dtype],
    )
    return template, gate.is_contiguous() and up.is_contiguous(), cuda_index(gate), []


_swiglu_plans = {}


def swiglu_forward(fn, gate, up):
    try:
        key = (gate.shape, gate.stride(), gate.dtype, gate.device, up.shape, up.stride(), up.dtype, up.device)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    template, dense, cuda_index, free = prepared(_swiglu_plans, key, _swiglu_plan, fn, gate, up)
    a = call_struct(_SWIGLU_FORWARD, template, cuda_index, free)
    y = dense_like(gate)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        gate, up = as_rows(gate)[0], as_rows(up)[0]
    a.y, a.gate, a.up = y.data_ptr(), gate.data_ptr(), up.data_ptr()
    status = lib.fo_swiglu_forward(a)
    if status or SYNC:
        finish(lib.fo_swiglu_forward, status, (a.device_type, a.device_index))
    free.append(a)
    return y


def _swiglu_fp8_plan(fn, gate, up, recipe, dtype, transpose):
    check_fp8_options(fn, recipe, dtype, transpose)
    template, dense, index, free = _swiglu_plan(fn, gate, up)
    for name, value in fp8_fields(recipe, dtype).items():
        setattr(template.fp8, name, value)
    return template, dense, index, free


_swiglu_fp8_plans = {}


def swiglu_fp8_forward(fn, gate, up, recipe, dtype, transpose):
    """silu(gate) * up as FP8, the bf16 (or other) output never written: (y
    or None, scale, y_t or None)."""
    try:
        key = (gate.shape, gate.stride(), gate.dtype, gate.device, up.shape, up.stride(), up.dtype, up.device)
        key += (recipe, dtype, transpose)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    plan = prepared(_swiglu_fp8_plans, key, _swiglu_fp8_plan, fn, gate, up, recipe, dtype, transpose)
    return gate_fp8_call(lib.fo_swiglu_forward, _SWIGLU_FORWARD, plan, gate, up, recipe, dtype, transpose)


def gate_fp8_call(forward, ctype, plan, gate, up, recipe, dtype, transpose):
    """A gate's forward (fo_swiglu_forward, fo_geglu_forward) with its FP8
    output, from a plan (template, dense, CUDA index, free structs): (y or
    None, scale, y_t or None)."""
    template, dense, cuda_index, free = plan
    a = call_struct(ctype, template, cuda_index, free)
    y, scale, y_t, amax = fp8_output(a.fp8, gate, recipe, dtype, transpose)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        gate, up = as_rows(gate)[0], as_rows(up)[0]
    a.gate, a.up = gate.data_ptr(), up.data_ptr()
    status = forward(a)
    if status or SYNC:
        finish(forward, status, (a.device_type, a.device_index))
    free.append(a)
    return y, scale, y_t


def _swiglu_backward_plan(dy, gate, up):
    """(backward template, dy, gate and up are used as they are, CUDA index,
    free backward structs) for a signature."""
    _, rows, cols, gate_stride = as_rows(gate)
    template = new_struct(
        _SWIGLU_BACKWARD,
        (lib.FO_DEVICE_CUDA if gate.is_cuda else lib.FO_DEVICE_CPU, max(gate.get_device(), 0)),
        dy_row_stride=as_rows(dy)[3],
        gate_row_stride=gate_stride,
        up_row_stride=as_rows(up)[3],
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[gate.dtype],
    )
    dense = dy.is_contiguous() and gate.is_contiguous() and up.is_contiguous()
    return template, dense, cuda_index(gate), []


_swiglu_backward_plans = {}


def swiglu_backward(dy, gate, up, want_gate, want_up, over_inputs=False):
    """(dgate or None, dup or None). over_inputs: the gradients are written
    over gate and up where they are dense (the library allows it), for a
    caller that owns them and needs them no more: no new memory."""
    key = (dy.shape, dy.stride(), gate.shape, gate.stride(), up.shape, up.stride(), gate.dtype, gate.device)
    template, dense, cuda_index, free = prepared(_swiglu_backward_plans, key, _swiglu_backward_plan, dy, gate, up)
    b = call_struct(_SWIGLU_BACKWARD, template, cuda_index, free)
    over_inputs = over_inputs and gate.is_contiguous() and up.is_contiguous()
    dgate = (gate if over_inputs else dense_like(gate)) if want_gate else None
    dup = (up if over_inputs else dense_like(gate)) if want_up else None
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        dy, gate, up = as_rows(dy)[0], as_rows(gate)[0], as_rows(up)[0]
    b.dgate, b.dup, b.dy, b.gate, b.up = address(dgate), address(dup), dy.data_ptr(), gate.data_ptr(), up.data_ptr()
    status = lib.fo_swiglu_backward(b)
    if status or SYNC:
        finish(lib.fo_swiglu_backward, status, (b.device_type, b.device_index))
    free.append(b)
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

    @custom_op("fused_ops_py::swiglu_fp8", mutates_args=())
    def swiglu_fp8_op(
        gate: Tensor, up: Tensor, recipe: str, dtype: torch.dtype, transpose: int
    ) -> Tuple[Tensor, Tensor, Tensor]:
        y, scale, y_t = swiglu_fp8_forward("fused_ops_py::swiglu_fp8", gate, up, recipe, dtype, TRANSPOSES[transpose])
        return fp8_op_output(y, scale, y_t, gate, dtype)

    @swiglu_fp8_op.register_fake
    def _(gate, up, recipe, dtype, transpose):
        return fake_fp8_output(gate, recipe, dtype, transpose)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_swiglu(gate, up, *, fp8=None, fp8_dtype=torch.float8_e4m3fn, transpose=False):
    """silu(gate) * up, elementwise (the gated MLP of Llama-style models);
    gate and up have one shape and dtype. Gradients flow to both.

    fp8="rowwise" or "tensorwise": the output in FP8 instead, in the same
    pass, the 16-bit output never written: the bytes and scales that
    fused_quantize_fp8(fused_swiglu(gate, up), recipe=fp8, dtype=fp8_dtype,
    transpose=transpose) returns, in its tuple. No gradient flows through it."""
    if fp8 is None:
        return _swiglu(gate, up, False)
    fn = "fused_swiglu"
    if compiling():
        check_swiglu(fn, gate, up)
        check_fp8_options(fn, fp8, fp8_dtype, transpose)
        y, scale, y_t = torch.ops.fused_ops_py.swiglu_fp8(gate, up, fp8, fp8_dtype, TRANSPOSES.index(transpose))
    else:
        y, scale, y_t = swiglu_fp8_forward(fn, gate, up, fp8, fp8_dtype, transpose)
    return fp8_result(y, scale, y_t, transpose)


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
