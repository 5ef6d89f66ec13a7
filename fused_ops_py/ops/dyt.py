"""DyT, weight * tanh(alpha * x) + bias over the last dimension
("Transformers without Normalization"; fo_dyt_*)."""

from typing import Optional, Tuple

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
    scratch,
)
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------

_DYT = ffi.typeof("fo_dyt_args *")


def check_dyt(fn, x, alpha, weight, bias):
    _args.check_tensor(fn, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{fn}: x is 0-d; DyT works over a last dimension")
    for name, param in (("alpha", alpha), ("weight", weight), ("bias", bias)):
        if param is None and name == "bias":
            continue
        _args.check_companion(fn, name, param, x)
        if param.dtype is not weight.dtype:
            raise TypeError(f"{fn}: {name} has dtype {param.dtype} but weight has {weight.dtype}; they must match")
    if alpha.numel() != 1:
        raise ValueError(f"{fn}: alpha has shape {tuple(alpha.shape)}; it must hold one element")
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and param.shape != x.shape[-1:]:
            raise ValueError(
                f"{fn}: {name} has shape {tuple(param.shape)} but must be ({x.shape[-1]},), "
                f"the last dimension of x (x has shape {tuple(x.shape)})"
            )
    if weight.dtype is not x.dtype and not (x.dtype in _args.HALF_DTYPES and weight.dtype is torch.float32):
        raise TypeError(
            f"{fn}: the parameters have dtype {weight.dtype} but x has {x.dtype}; they must have x's dtype, "
            "or float32 when x is float16/bfloat16"
        )


def _dyt_plan(fn, x, alpha, weight, bias):
    """(struct template, CUDA index, free structs) for a signature."""
    check_dyt(fn, x, alpha, weight, bias)
    _, rows, cols, stride = as_rows(x)
    device = (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0))
    template = new_struct(
        _DYT,
        device,
        x_row_stride=stride,
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[x.dtype],
        param_dtype=DTYPE_CODES[weight.dtype],
    )
    return template, cuda_index(x), []


_dyt_plans = {}
_dyt_workspaces = {}


def _dyt_struct(fn, x, alpha, weight, bias):
    """(struct, template, free structs, inputs), the struct's inputs filled;
    inputs (x with dense rows, the parameters made contiguous) must stay
    alive until the call returns."""
    try:
        key = (x.shape, x.stride(), x.dtype, x.device, weight.shape, weight.dtype, alpha.shape, bias is None)
    except AttributeError:  # not tensors: the checks name what is wrong
        key = None
    template, cuda_index, free = prepared(_dyt_plans, key, _dyt_plan, fn, x, alpha, weight, bias)
    a = call_struct(_DYT, template, cuda_index, free)
    inputs = (as_rows(x)[0], alpha.contiguous(), weight.contiguous(), bias.contiguous() if bias is not None else None)
    a.x, a.alpha, a.weight = inputs[0].data_ptr(), inputs[1].data_ptr(), inputs[2].data_ptr()
    a.bias = address(inputs[3])
    return a, template, free, inputs


def dyt_forward(fn, x, alpha, weight, bias):
    a, _, free, inputs = _dyt_struct(fn, x, alpha, weight, bias)
    y = dense_like(x)
    a.y = y.data_ptr()
    status = lib.fo_dyt_forward(a)
    if status or SYNC:
        finish(lib.fo_dyt_forward, status, (a.device_type, a.device_index))
    free.append(a)
    return y


def dyt_backward(dy, x, alpha, weight, bias, want_dx, want_dalpha, want_dweight, want_dbias):
    """(dx, dalpha, dweight, dbias), each None where not wanted."""
    a, template, free, inputs = _dyt_struct("fused_dyt", x, alpha, weight, bias)
    dy_rows, _, _, a.dy_row_stride = as_rows(dy)
    a.dy = dy_rows.data_ptr()
    dx = dense_like(x) if want_dx else None
    dalpha = alpha.new_empty(alpha.shape) if want_dalpha else None
    dweight = weight.new_empty(weight.shape) if want_dweight else None
    dbias = weight.new_empty(weight.shape) if want_dbias else None
    a.dx, a.dalpha, a.dweight, a.dbias = address(dx), address(dalpha), address(dweight), address(dbias)
    workspace = None
    if want_dalpha or want_dweight or want_dbias:
        key = (template, want_dalpha, want_dweight, want_dbias)
        workspace = scratch(_dyt_workspaces, key, lib.fo_dyt_backward_workspace_bytes, a, x)
    a.workspace, a.workspace_bytes = (workspace.data_ptr(), workspace.numel()) if workspace is not None else (0, 0)
    status = lib.fo_dyt_backward(a)
    if status or SYNC:
        finish(lib.fo_dyt_backward, status, (a.device_type, a.device_index))
    free.append(a)
    return dx, dalpha, dweight, dbias


# autograd ------------------------------------------------------------------------------


def dyt_save(ctx, x, alpha, weight, bias):
    ctx.save_for_backward(x, alpha, weight, bias)


def dyt_grads(backward, ctx, dy):
    """(dx, dalpha, dweight, dbias) from backward(dy, x, alpha, weight, bias,
    want_dx, want_dalpha, want_dweight, want_dbias)."""
    x, alpha, weight, bias = ctx.saved_tensors
    wants = ctx.needs_input_grad[:4]
    grads = backward(dy, x, alpha, weight, bias, wants[0], wants[1], wants[2], wants[3] and bias is not None)
    return tuple(g if want else None for g, want in zip(grads, wants))


class DyTFunction(torch.autograd.Function):
    """apply(x, alpha, weight, bias)."""

    @staticmethod
    def forward(ctx, x, alpha, weight, bias):
        dyt_save(ctx, x, alpha, weight, bias)
        return dyt_forward("fused_dyt", x, alpha, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        return dyt_grads(dyt_backward, ctx, dy)


apply_dyt = eager_apply(DyTFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::dyt", mutates_args=())
    def dyt_op(x: Tensor, alpha: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
        return dyt_forward("fused_ops_py::dyt", x, alpha, weight, bias)

    @dyt_op.register_fake
    def _(x, alpha, weight, bias):
        return x.new_empty(x.shape)

    @custom_op("fused_ops_py::dyt_backward", mutates_args=())
    def dyt_backward_op(
        dy: Tensor,
        x: Tensor,
        alpha: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        want_dx: bool,
        want_dalpha: bool,
        want_dweight: bool,
        want_dbias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        grads = dyt_backward(dy, x, alpha, weight, bias, want_dx, want_dalpha, want_dweight, want_dbias)
        return tuple(or_empty(g, x) for g in grads)

    @dyt_backward_op.register_fake
    def _(dy, x, alpha, weight, bias, want_dx, want_dalpha, want_dweight, want_dbias):
        return (
            x.new_empty(x.shape) if want_dx else empty(x),
            alpha.new_empty(alpha.shape) if want_dalpha else empty(x),
            weight.new_empty(weight.shape) if want_dweight else empty(x),
            weight.new_empty(weight.shape) if want_dbias else empty(x),
        )

    def _dyt_setup(ctx, inputs, output):
        dyt_save(ctx, *inputs)

    def _dyt_grad(ctx, dy):
        return dyt_grads(torch.ops.fused_ops_py.dyt_backward, ctx, dy)

    dyt_op.register_autograd(_dyt_grad, setup_context=_dyt_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_dyt(x, alpha, weight, bias=None):
    """DyT, Dynamic Tanh ("Transformers without Normalization"):
    weight * tanh(alpha * x) + bias over the last dimension of x, with alpha
    a one-element tensor (a learned scalar) and weight and bias of shape
    [C], x's dtype (or float32 beside float16/bfloat16 x). Gradients flow to
    all four; their sums run in a fixed order (the same bits every run)."""
    fn = "fused_dyt"
    if compiling():
        check_dyt(fn, x, alpha, weight, bias)
        return torch.ops.fused_ops_py.dyt(x, alpha, weight, bias)
    try:
        wants_grad = torch.is_grad_enabled() and (
            x.requires_grad or alpha.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        )
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_dyt(x, alpha, weight, bias)
    return dyt_forward(fn, x, alpha, weight, bias)
