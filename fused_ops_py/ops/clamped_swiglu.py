"""gpt-oss's clamped SwiGLU over one gate_up tensor, gate and up in pairs or
halves (fo_clamped_swiglu_*)."""

import functools
import math

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


# clamped swiglu (gpt-oss's experts): one gate_up input, gate and up in
# pairs or halves; backward needs gate_up, which forward saves

_CLAMPED_SWIGLU = ffi.typeof("fo_clamped_swiglu_args *")
_GLU_LAYOUTS = {True: lib.FO_GLU_INTERLEAVED, False: lib.FO_GLU_HALVES}


def check_clamped_swiglu(fn, gate_up, alpha, limit, interleaved):
    _args.check_tensor(fn, "gate_up", gate_up)
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(
            f"{fn}: gate_up has shape {tuple(gate_up.shape)}; its last dimension must be even "
            "(gate and up side by side)"
        )
    _args.check_number(fn, "alpha", alpha)
    _args.check_number(fn, "limit", limit)
    if not math.isfinite(alpha):
        raise ValueError(f"{fn}: alpha={alpha!r} must be finite")
    if not limit > 0:
        raise ValueError(f"{fn}: limit={limit!r} must be positive (inf: no clamp)")
    if not isinstance(interleaved, bool):
        raise TypeError(f"{fn}: interleaved must be a bool, got {type(interleaved).__name__}")


@functools.cache
def clamp_grad_at_limit():
    """Whether the installed torch.clamp passes a gradient at its bounds
    (up to torch 2.13 it does; from 2.14 it does not)."""
    x = torch.ones((), requires_grad=True)
    with torch.enable_grad():
        (gradient,) = torch.autograd.grad(x.clamp(max=1.0), x)
    return int(gradient.item() == 1.0)


def _clamped_swiglu_plan(fn, gate_up, alpha, limit, interleaved):
    """(struct template, CUDA index, free structs) for a signature."""
    check_clamped_swiglu(fn, gate_up, alpha, limit, interleaved)
    _, rows, cols2, stride = as_rows(gate_up)
    device = (lib.FO_DEVICE_CUDA if gate_up.is_cuda else lib.FO_DEVICE_CPU, max(gate_up.get_device(), 0))
    template = new_struct(
        _CLAMPED_SWIGLU,
        device,
        gate_up_row_stride=stride,
        rows=rows,
        cols=cols2 // 2,
        dtype=DTYPE_CODES[gate_up.dtype],
        layout=_GLU_LAYOUTS[interleaved],
        alpha=alpha,
        limit=limit,
        grad_at_limit=clamp_grad_at_limit(),
    )
    return template, cuda_index(gate_up), []


_clamped_swiglu_plans = {}


def _clamped_swiglu_call(fn, gate_up, alpha, limit, interleaved, dy=None):
    try:
        key = (gate_up.shape, gate_up.stride(), gate_up.dtype, gate_up.device, alpha, limit, interleaved)
    except AttributeError:  # not a tensor: the checks name what is wrong
        key = None
    template, cuda_index, free = prepared(
        _clamped_swiglu_plans, key, _clamped_swiglu_plan, fn, gate_up, alpha, limit, interleaved
    )
    a = call_struct(_CLAMPED_SWIGLU, template, cuda_index, free)
    gate_up_rows = as_rows(gate_up)[0]  # a copy where no view has dense rows: alive until the call returns
    a.gate_up = gate_up_rows.data_ptr()
    if dy is None:
        out = torch.empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2), dtype=gate_up.dtype, device=gate_up.device)
        a.y, entry = out.data_ptr(), lib.fo_clamped_swiglu_forward
    else:
        dy_rows, _, _, a.dy_row_stride = as_rows(dy)
        out = dense_like(gate_up)
        a.dy, a.dgate_up, entry = dy_rows.data_ptr(), out.data_ptr(), lib.fo_clamped_swiglu_backward
    status = entry(a)
    if status or SYNC:
        finish(entry, status, (a.device_type, a.device_index))
    free.append(a)
    return out


def clamped_swiglu_forward(fn, gate_up, alpha, limit, interleaved):
    return _clamped_swiglu_call(fn, gate_up, alpha, limit, interleaved)


def clamped_swiglu_backward(dy, gate_up, alpha, limit, interleaved):
    """dgate_up, laid out as gate_up."""
    return _clamped_swiglu_call("fused_clamped_swiglu", gate_up, alpha, limit, interleaved, dy)


# autograd ------------------------------------------------------------------------------


def clamped_swiglu_save(ctx, gate_up, alpha, limit, interleaved):
    ctx.save_for_backward(gate_up)
    ctx.clamped_swiglu = (alpha, limit, interleaved)


def clamped_swiglu_grads(backward, ctx, dy):
    """dgate_up from backward(dy, gate_up, alpha, limit, interleaved)."""
    (gate_up,) = ctx.saved_tensors
    return backward(dy, gate_up, *ctx.clamped_swiglu)


class ClampedSwiGLUFunction(torch.autograd.Function):
    """apply(gate_up, alpha, limit, interleaved)."""

    @staticmethod
    def forward(ctx, gate_up, alpha, limit, interleaved):
        clamped_swiglu_save(ctx, gate_up, alpha, limit, interleaved)
        return clamped_swiglu_forward("fused_clamped_swiglu", gate_up, alpha, limit, interleaved)

    @staticmethod
    def backward(ctx, dy):
        return clamped_swiglu_grads(clamped_swiglu_backward, ctx, dy), None, None, None


apply_clamped_swiglu = eager_apply(ClampedSwiGLUFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::clamped_swiglu", mutates_args=())
    def clamped_swiglu_op(gate_up: Tensor, alpha: float, limit: float, interleaved: bool) -> Tensor:
        return clamped_swiglu_forward("fused_ops_py::clamped_swiglu", gate_up, alpha, limit, interleaved)

    @clamped_swiglu_op.register_fake
    def _(gate_up, alpha, limit, interleaved):
        return gate_up.new_empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2))

    @custom_op("fused_ops_py::clamped_swiglu_backward", mutates_args=())
    def clamped_swiglu_backward_op(
        dy: Tensor, gate_up: Tensor, alpha: float, limit: float, interleaved: bool
    ) -> Tensor:
        return clamped_swiglu_backward(dy, gate_up, alpha, limit, interleaved)

    @clamped_swiglu_backward_op.register_fake
    def _(dy, gate_up, alpha, limit, interleaved):
        return gate_up.new_empty(gate_up.shape)

    def _clamped_swiglu_setup(ctx, inputs, output):
        clamped_swiglu_save(ctx, *inputs)

    def _clamped_swiglu_grad(ctx, dy):
        return (clamped_swiglu_grads(torch.ops.fused_ops_py.clamped_swiglu_backward, ctx, dy), None, None, None)

    clamped_swiglu_op.register_autograd(_clamped_swiglu_grad, setup_context=_clamped_swiglu_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_clamped_swiglu(gate_up, alpha=1.702, limit=7.0, interleaved=True):
    """gpt-oss's clamped SwiGLU: with gate and up the two halves of gate_up's
    last dimension, interleaved (gate_up[..., ::2] and gate_up[..., 1::2],
    gpt-oss's layout) or side by side (chunk(2, dim=-1)),
    g = gate.clamp(max=limit) and u = up.clamp(-limit, limit):
    (u + 1) * g * sigmoid(alpha * g), of gate_up's shape with its last
    dimension halved. limit=inf clamps nothing. The gradient flows to
    gate_up, in its layout."""
    fn = "fused_clamped_swiglu"
    if compiling():
        check_clamped_swiglu(fn, gate_up, alpha, limit, interleaved)
        return torch.ops.fused_ops_py.clamped_swiglu(gate_up, float(alpha), float(limit), interleaved)
    try:
        wants_grad = records_grad(gate_up)
    except AttributeError:  # not a tensor: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_clamped_swiglu(gate_up, alpha, limit, interleaved)
    return clamped_swiglu_forward(fn, gate_up, alpha, limit, interleaved)
