"""The ops: one torch.autograd.Function each, and the public function that
checks its arguments, then takes the cheap path (no autograd bookkeeping, no
saved state) when no gradient is wanted."""

import torch

from . import _args, _ops
from ._args import DTYPE_CODES, address, as_rows, dense_like, device_args
from ._ffi import call, lib


def _wants_grad(x, other=None):
    """Whether autograd must record the call (inference skips its cost)."""
    return (x.requires_grad or (other is not None and other.requires_grad)) and torch.is_grad_enabled()


# relu(x * scale + bias) and relu --------------------------------------------
#
# Forward saves a 1-bit-per-element mask (y > 0) rather than x or y: backward
# reads dy and 1/8 byte an element instead of dy and a whole element, the
# fewest bytes that say where the gradient flows (bf16: 4.125 bytes an element
# moved instead of 6).


def _bias_scale_relu_forward(x, bias, scale, want_mask):
    rows_view, rows, cols, row_stride = as_rows(x)
    if bias is not None:
        bias = bias.contiguous()  # the library reads cols dense elements
    y = dense_like(x)
    mask = None
    if want_mask:
        mask = x.new_empty((rows, (cols + 7) // 8), dtype=torch.uint8)
    bias_dtype = bias.dtype if bias is not None else x.dtype
    call(
        lib.fo_bias_scale_relu_forward,
        *device_args(x), y.data_ptr(), address(mask),
        rows_view.data_ptr(), row_stride, address(bias),
        rows, cols, DTYPE_CODES[x.dtype], DTYPE_CODES[bias_dtype], scale,
    )
    return y, mask


def _bias_scale_relu_backward(dy, mask, scale, want_dx, bias_dtype):
    """(dx or None, dbias or None); bias_dtype None means no bias gradient."""
    dy_view, rows, cols, row_stride = as_rows(dy)
    device = device_args(dy)
    dx = dense_like(dy) if want_dx else None
    dbias = scratch = None
    if bias_dtype is not None:
        dbias = dy.new_empty(cols, dtype=bias_dtype)
        scratch = _args.workspace(
            lib.fo_bias_scale_relu_backward_workspace_bytes, device[0], rows, cols,
            DTYPE_CODES[dy.dtype], like=dy,
        )
    call(
        lib.fo_bias_scale_relu_backward,
        *device, address(dx), address(dbias), address(scratch),
        0 if scratch is None else scratch.numel(),
        dy_view.data_ptr(), row_stride, mask.data_ptr(),
        rows, cols, DTYPE_CODES[dy.dtype],
        DTYPE_CODES[bias_dtype if bias_dtype is not None else dy.dtype], scale,
    )
    return dx, dbias


class BiasScaleReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, scale):
        y, mask = _bias_scale_relu_forward(x, bias, scale, want_mask=True)
        ctx.save_for_backward(mask)
        ctx.scale = scale
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        (mask,) = ctx.saved_tensors
        want_dbias = ctx.bias_dtype is not None and ctx.needs_input_grad[1]
        dx, dbias = _bias_scale_relu_backward(
            dy, mask, ctx.scale, ctx.needs_input_grad[0],
            ctx.bias_dtype if want_dbias else None,
        )
        return dx, dbias, None


def _check_bias_scale_relu(fn, x, bias, scale):
    _args.check_tensor(fn, "x", x)
    _args.check_finite_number(fn, "scale", scale)
    if bias is None:
        return
    _args.check_tensor(fn, "bias", bias)
    _args.check_same_device(fn, "bias", bias, x)
    _args.check_param_dtype(fn, "bias", bias, x)
    if x.dim() == 0:
        raise ValueError(f"{fn}: x is 0-d; the bias is broadcast over a last dimension")
    features = x.shape[-1]
    if bias.dim() != 1 or bias.shape[0] != features:
        raise ValueError(
            f"{fn}: bias has shape {tuple(bias.shape)} but must be ({features},), "
            f"the last dimension of x (x has shape {tuple(x.shape)})"
        )


def fused_bias_scale_relu(x, bias, scale=1.0):
    """relu(x * scale + bias), with bias of shape [N] broadcast over the last
    dimension N of x. Gradients flow to x and bias."""
    _check_bias_scale_relu("fused_bias_scale_relu", x, bias, scale)
    if _ops.compiling():
        return torch.ops.fused_ops_py.bias_scale_relu(x, bias, float(scale), _wants_grad(x, bias))[0]
    if _wants_grad(x, bias):
        return BiasScaleReLUFunction.apply(x, bias, float(scale))
    return _bias_scale_relu_forward(x, bias, float(scale), want_mask=False)[0]


def relu(x):
    """max(x, 0), elementwise; NaN stays NaN as in torch.relu."""
    _args.check_tensor("relu", "x", x)
    if _ops.compiling():
        return torch.ops.fused_ops_py.bias_scale_relu(x, None, 1.0, _wants_grad(x))[0]
    if _wants_grad(x):
        return BiasScaleReLUFunction.apply(x, None, 1.0)
    return _bias_scale_relu_forward(x, None, 1.0, want_mask=False)[0]


# square ---------------------------------------------------------------------
# Backward needs x (dx = 2 x dy), so forward saves x itself: no extra bytes.


def _square_forward(x):
    rows_view, rows, cols, row_stride = as_rows(x)
    y = dense_like(x)
    call(
        lib.fo_square_forward,
        *device_args(x), y.data_ptr(), rows_view.data_ptr(), row_stride,
        rows, cols, DTYPE_CODES[x.dtype],
    )
    return y


def _square_backward(dy, x):
    x_view, rows, cols, x_stride = as_rows(x)
    dy_view, _, _, dy_stride = as_rows(dy)
    dx = dense_like(x)
    call(
        lib.fo_square_backward,
        *device_args(x), dx.data_ptr(), dy_view.data_ptr(), dy_stride,
        x_view.data_ptr(), x_stride, rows, cols, DTYPE_CODES[x.dtype],
    )
    return dx


class SquareFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _square_forward(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _square_backward(dy, x)


def square(x):
    """x * x, elementwise."""
    _args.check_tensor("square", "x", x)
    if _ops.compiling():
        return torch.ops.fused_ops_py.square(x)
    if _wants_grad(x):
        return SquareFunction.apply(x)
    return _square_forward(x)


# reduce_sum -----------------------------------------------------------------


def _reduce_sum(x):
    dense = x.contiguous()
    out = x.new_empty(())
    device = device_args(x)
    code = DTYPE_CODES[x.dtype]
    scratch = _args.workspace(lib.fo_reduce_sum_workspace_bytes, device[0], x.numel(), code, like=x)
    call(
        lib.fo_reduce_sum,
        *device, out.data_ptr(), address(scratch),
        0 if scratch is None else scratch.numel(), dense.data_ptr(), x.numel(), code,
    )
    return out


class ReduceSumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.input_shape = x.shape
        return _reduce_sum(x)

    @staticmethod
    def backward(ctx, dy):
        # every element gets dy: an expanded view, as torch.sum's backward
        return dy.expand(ctx.input_shape)


def reduce_sum(x):
    """The sum of all elements as a 0-d tensor of x's dtype, accumulated in
    fp32 (fp64 for fp64) in a fixed order: the same bits on every run."""
    _args.check_tensor("reduce_sum", "x", x)
    if _ops.compiling():
        return torch.ops.fused_ops_py.reduce_sum(x)
    if _wants_grad(x):
        return ReduceSumFunction.apply(x)
    return _reduce_sum(x)


# swiglu ---------------------------------------------------------------------
# Backward needs gate and up themselves, so forward saves those (the
# caller's own tensors: no extra memory) and not its output.


def _check_swiglu(fn, gate, up):
    _args.check_tensor(fn, "gate", gate)
    _args.check_tensor(fn, "up", up)
    _args.check_same_device(fn, "up", up, gate, "gate")
    if up.dtype != gate.dtype:
        raise TypeError(f"{fn}: up has dtype {up.dtype} but gate has dtype {gate.dtype}; they must match")
    if up.shape != gate.shape:
        raise ValueError(f"{fn}: up has shape {tuple(up.shape)} but gate has shape {tuple(gate.shape)}; they must match")


def _swiglu_forward(gate, up):
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    y = dense_like(gate)
    call(
        lib.fo_swiglu_forward,
        *device_args(gate), y.data_ptr(), gate_view.data_ptr(), gate_stride,
        up_view.data_ptr(), up_stride, rows, cols, DTYPE_CODES[gate.dtype],
    )
    return y


def _swiglu_backward(dy, gate, up, want_gate, want_up):
    """(dgate or None, dup or None)."""
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    dy_view, _, _, dy_stride = as_rows(dy)
    dgate = dense_like(gate) if want_gate else None
    dup = dense_like(gate) if want_up else None
    call(
        lib.fo_swiglu_backward,
        *device_args(gate), address(dgate), address(dup), dy_view.data_ptr(), dy_stride,
        gate_view.data_ptr(), gate_stride, up_view.data_ptr(), up_stride,
        rows, cols, DTYPE_CODES[gate.dtype],
    )
    return dgate, dup


class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return _swiglu_forward(gate, up)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        return _swiglu_backward(dy, gate, up, *ctx.needs_input_grad)


def fused_swiglu(gate, up):
    """silu(gate) * up, elementwise (the gated MLP of Llama-style models);
    gate and up have one shape and dtype. Gradients flow to both."""
    _check_swiglu("fused_swiglu", gate, up)
    if _ops.compiling():
        return torch.ops.fused_ops_py.swiglu(gate, up)
    if _wants_grad(gate, up):
        return SwiGLUFunction.apply(gate, up)
    return _swiglu_forward(gate, up)
