"""gelu(gate) * up, exact or tanh, the gated MLP of Gemma-style models
(fo_geglu_*)."""

from typing import Tuple

import torch
from torch import Tensor

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
    records_grad,
)
from .._ffi import SYNC, ffi, finish, lib
from .quantize_fp8 import (
    TRANSPOSES,
    check_fp8_options,
    fake_fp8_output,
    fp8_fields,
    fp8_op_output,
    fp8_result,
)
from .swiglu import check_swiglu, gate_fp8_call

# the raw calls -------------------------------------------------------------------------


# geglu: swiglu's shape with gelu (exact or tanh) for silu; backward needs gate
# and up, which forward saves (the caller's own tensors)

_GEGLU_FORWARD = ffi.typeof("fo_geglu_forward_args *")
_GEGLU_BACKWARD = ffi.typeof("fo_geglu_backward_args *")
GELU_APPROXIMATIONS = {"none": lib.FO_GELU_NONE, "tanh": lib.FO_GELU_TANH}


def check_geglu(fn, gate, up, approximate):
    check_swiglu(fn, gate, up)
    if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"{fn}: approximate={approximate!r} must be 'tanh' or 'none'")


def _geglu_plan(fn, gate, up, approximate):
    """(forward template, backward template for a dense dy, gate and up are
    used as they are, CUDA index, free forward structs) for a signature."""
    check_geglu(fn, gate, up, approximate)
    _, rows, cols, gate_stride = as_rows(gate)
    device = (lib.FO_DEVICE_CUDA if gate.is_cuda else lib.FO_DEVICE_CPU, max(gate.get_device(), 0))
    shared = dict(
        gate_row_stride=gate_stride,
        up_row_stride=as_rows(up)[3],
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[gate.dtype],
        approximate=GELU_APPROXIMATIONS[approximate],
    )
    forward = new_struct(_GEGLU_FORWARD, device, **shared)
    backward = new_struct(_GEGLU_BACKWARD, device, dy_row_stride=cols, **shared)
    return forward, backward, gate.is_contiguous() and up.is_contiguous(), cuda_index(gate), []


_geglu_plans = {}


def geglu_forward(fn, gate, up, approximate, prepare_backward=False):
    """(y, backward or None): with prepare_backward, where gate and up are
    dense, the backward's struct for a dense dy (geglu_backward_prepared)."""
    try:
        key = (
            gate.shape,
            gate.stride(),
            gate.dtype,
            gate.device,
            up.shape,
            up.stride(),
            up.dtype,
            up.device,
            approximate,
        )
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    forward, backward_template, dense, cuda_index, free = prepared(
        _geglu_plans, key, _geglu_plan, fn, gate, up, approximate
    )
    a = call_struct(_GEGLU_FORWARD, forward, cuda_index, free)
    y = dense_like(gate)
    if not dense:  # views, or copies where no view has dense rows: kept alive until the call returns
        gate, up = as_rows(gate)[0], as_rows(up)[0]
    a.y, a.gate, a.up = y.data_ptr(), gate.data_ptr(), up.data_ptr()
    status = lib.fo_geglu_forward(a)
    if status or SYNC:
        finish(lib.fo_geglu_forward, status, (a.device_type, a.device_index))
    backward = None
    if prepare_backward and dense:
        b = ffi.new(_GEGLU_BACKWARD, backward_template[0])
        b.stream, b.gate, b.up = a.stream, a.gate, a.up  # autograd runs backward on the forward's stream
        backward = b
    free.append(a)
    return y, backward


def _geglu_fp8_plan(fn, gate, up, approximate, recipe, dtype, transpose):
    check_fp8_options(fn, recipe, dtype, transpose)
    forward, _, dense, index, free = _geglu_plan(fn, gate, up, approximate)
    for name, value in fp8_fields(recipe, dtype).items():
        setattr(forward.fp8, name, value)
    return forward, dense, index, free


_geglu_fp8_plans = {}


def geglu_fp8_forward(fn, gate, up, approximate, recipe, dtype, transpose):
    """gelu(gate) * up as FP8, the bf16 (or other) output never written: (y
    or None, scale, y_t or None)."""
    try:
        key = (gate.shape, gate.stride(), gate.dtype, gate.device, up.shape, up.stride(), up.dtype, up.device)
        key += (approximate, recipe, dtype, transpose)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    plan = prepared(_geglu_fp8_plans, key, _geglu_fp8_plan, fn, gate, up, approximate, recipe, dtype, transpose)
    return gate_fp8_call(lib.fo_geglu_forward, _GEGLU_FORWARD, plan, gate, up, recipe, dtype, transpose)


def geglu_backward_prepared(b, dy_rows, want_gate, want_up, gate):
    """(dgate or None, dup or None) from b, a backward struct filled but for
    dy and the gradients (geglu_forward's, for a dense dy, or
    geglu_backward's own); dy_rows is dy with rows as b says."""
    dgate = dense_like(gate) if want_gate else None
    dup = dense_like(gate) if want_up else None
    b.dy, b.dgate, b.dup = dy_rows.data_ptr(), address(dgate), address(dup)
    status = lib.fo_geglu_backward(b)
    if status or SYNC:
        finish(lib.fo_geglu_backward, status, (b.device_type, b.device_index))
    return dgate, dup


def geglu_backward(dy, gate, up, approximate, want_gate, want_up):
    """(dgate or None, dup or None): any layout of dy, gate and up."""
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    dy_view, _, _, dy_stride = as_rows(dy)
    device = device_args(gate)
    b = new_struct(
        _GEGLU_BACKWARD,
        device,
        stream=device[2],
        dy_row_stride=dy_stride,
        gate=gate_view.data_ptr(),
        gate_row_stride=gate_stride,
        up=up_view.data_ptr(),
        up_row_stride=up_stride,
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[gate.dtype],
        approximate=GELU_APPROXIMATIONS[approximate],
    )
    return geglu_backward_prepared(b, dy_view, want_gate, want_up, gate)


# autograd ------------------------------------------------------------------------------


def geglu_save(ctx, gate, up, approximate):
    ctx.save_for_backward(gate, up)
    ctx.approximate = approximate


def geglu_grads(backward, ctx, dy):
    """(dgate, dup) from backward(dy, gate, up, approximate, want_gate, want_up)."""
    gate, up = ctx.saved_tensors
    want_gate, want_up = ctx.needs_input_grad[:2]
    dgate, dup = backward(dy, gate, up, ctx.approximate, want_gate, want_up)
    return dgate if want_gate else None, dup if want_up else None


class GeGLUFunction(torch.autograd.Function):
    """apply(gate, up, approximate). Forward prepares backward's struct, as
    NormFunction's does; backward takes it for a dense dy and the gate and
    up forward saw."""

    @staticmethod
    def forward(ctx, gate, up, approximate):
        geglu_save(ctx, gate, up, approximate)
        y, ctx.prepared = geglu_forward("fused_geglu", gate, up, approximate, True)
        return y

    @staticmethod
    def backward(ctx, dy):
        prepared = ctx.prepared
        if prepared is not None and dy.is_contiguous():
            gate, up = ctx.saved_tensors
            if (
                gate.data_ptr() == prepared.gate
                and up.data_ptr() == prepared.up
                and gate.is_contiguous()
                and up.is_contiguous()
            ):
                want_gate, want_up = ctx.needs_input_grad[:2]
                return (*geglu_backward_prepared(prepared, dy, want_gate, want_up, gate), None)
        return (*geglu_grads(geglu_backward, ctx, dy), None)


apply_geglu = eager_apply(GeGLUFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::geglu", mutates_args=())
    def geglu_op(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
        return geglu_forward("fused_ops_py::geglu", gate, up, approximate)[0]

    @geglu_op.register_fake
    def _(gate, up, approximate):
        return gate.new_empty(gate.shape)

    @custom_op("fused_ops_py::geglu_backward", mutates_args=())
    def geglu_backward_op(
        dy: Tensor, gate: Tensor, up: Tensor, approximate: str, want_gate: bool, want_up: bool
    ) -> Tuple[Tensor, Tensor]:
        dgate, dup = geglu_backward(dy, gate, up, approximate, want_gate, want_up)
        return or_empty(dgate, gate), or_empty(dup, gate)

    @geglu_backward_op.register_fake
    def _(dy, gate, up, approximate, want_gate, want_up):
        return (
            gate.new_empty(gate.shape) if want_gate else empty(gate),
            gate.new_empty(gate.shape) if want_up else empty(gate),
        )

    def _geglu_setup(ctx, inputs, output):
        geglu_save(ctx, *inputs)

    def _geglu_grad(ctx, dy):
        return (*geglu_grads(torch.ops.fused_ops_py.geglu_backward, ctx, dy), None)

    geglu_op.register_autograd(_geglu_grad, setup_context=_geglu_setup)

    @custom_op("fused_ops_py::geglu_fp8", mutates_args=())
    def geglu_fp8_op(
        gate: Tensor, up: Tensor, approximate: str, recipe: str, dtype: torch.dtype, transpose: int
    ) -> Tuple[Tensor, Tensor, Tensor]:
        fn = "fused_ops_py::geglu_fp8"
        y, scale, y_t = geglu_fp8_forward(fn, gate, up, approximate, recipe, dtype, TRANSPOSES[transpose])
        return fp8_op_output(y, scale, y_t, gate, dtype)

    @geglu_fp8_op.register_fake
    def _(gate, up, approximate, recipe, dtype, transpose):
        return fake_fp8_output(gate, recipe, dtype, transpose)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_geglu(gate, up, approximate="tanh", *, fp8=None, fp8_dtype=torch.float8_e4m3fn, transpose=False):
    """gelu(gate, approximate=approximate) * up, elementwise (the gated MLP
    of Gemma-style models); approximate is "tanh" (the default here, as
    Gemma's gelu_pytorch_tanh) or "none" (erf); gate and up have one shape
    and dtype. Gradients flow to both.

    fp8="rowwise" or "tensorwise": the output in FP8 instead, in the same
    pass, as fused_swiglu's fp8 (fused_quantize_fp8 of the output)."""
    fn = "fused_geglu"
    if fp8 is not None:
        if compiling():
            check_geglu(fn, gate, up, approximate)
            check_fp8_options(fn, fp8, fp8_dtype, transpose)
            index = TRANSPOSES.index(transpose)
            y, scale, y_t = torch.ops.fused_ops_py.geglu_fp8(gate, up, approximate, fp8, fp8_dtype, index)
        else:
            y, scale, y_t = geglu_fp8_forward(fn, gate, up, approximate, fp8, fp8_dtype, transpose)
        return fp8_result(y, scale, y_t, transpose)
    if compiling():
        check_geglu(fn, gate, up, approximate)
        return torch.ops.fused_ops_py.geglu(gate, up, approximate)
    try:
        wants_grad = records_grad(gate, up)
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_geglu(gate, up, approximate)
    return geglu_forward(fn, gate, up, approximate)[0]
