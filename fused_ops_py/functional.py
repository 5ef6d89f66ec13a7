"""The ops: one torch.autograd.Function each, and the public function that
checks its arguments, then takes the cheap path (no autograd bookkeeping, no
saved state) when no gradient is wanted."""

import math

import torch

from . import _args, _ops
from ._args import DTYPE_CODES, as_rows, dense_like, device_args, param_dtype_ok
from ._ffi import SYNC, finish, lib

Tensor = torch.Tensor


def _wants_grad(x, other=None):
    """Whether autograd must record the call (inference skips its cost)."""
    return torch.is_grad_enabled() and (x.requires_grad or (other is not None and other.requires_grad))


# relu(x * scale + bias) and relu --------------------------------------------
#
# Forward saves a 1-bit-per-element mask (y > 0) rather than x or y: backward
# reads dy and 1/8 byte an element instead of dy and a whole element, the
# fewest bytes that say where the gradient flows (bf16: 4.125 bytes an element
# moved instead of 6).


def _bias_scale_relu_forward(x, bias, scale, want_mask):
    x_view, rows, cols, x_stride = as_rows(x)
    code = DTYPE_CODES[x.dtype]
    bias_address, bias_code = 0, code
    if bias is not None:
        bias = bias.contiguous()  # the library reads cols dense elements
        bias_address, bias_code = bias.data_ptr(), DTYPE_CODES[bias.dtype]
    y = dense_like(x)
    mask = None
    if want_mask:  # (rows, n), not ((rows, n)): 0.6 us less
        mask = x.new_empty(rows, (cols + 7) // 8, dtype=torch.uint8)
    device = device_args(x)
    status = lib.fo_bias_scale_relu_forward(
        *device, y.data_ptr(), mask.data_ptr() if mask is not None else 0,
        x_view.data_ptr(), x_stride, bias_address, rows, cols, code, bias_code, scale,
    )
    if status or SYNC:
        finish(lib.fo_bias_scale_relu_forward, status, device)
    return y, mask


def _bias_scale_relu_backward(dy, mask, scale, want_dx, bias_dtype):
    """(dx or None, dbias or None); bias_dtype None means no bias gradient."""
    dy_view, rows, cols, row_stride = as_rows(dy)
    device = device_args(dy)
    code = DTYPE_CODES[dy.dtype]
    dx = dense_like(dy) if want_dx else None
    dbias = scratch = None
    if bias_dtype is not None:
        dbias = dy.new_empty(cols, dtype=bias_dtype)
        scratch = _args.workspace(
            lib.fo_bias_scale_relu_backward_workspace_bytes, device[0], rows, cols, code, like=dy,
        )
    status = lib.fo_bias_scale_relu_backward(
        *device, dx.data_ptr() if dx is not None else 0, dbias.data_ptr() if dbias is not None else 0,
        scratch.data_ptr() if scratch is not None else 0, scratch.numel() if scratch is not None else 0,
        dy_view.data_ptr(), row_stride, mask.data_ptr(),
        rows, cols, code, DTYPE_CODES[bias_dtype] if bias_dtype is not None else code, scale,
    )
    if status or SYNC:
        finish(lib.fo_bias_scale_relu_backward, status, device)
    return dx, dbias


class BiasScaleReLUFunction(torch.autograd.Function):
    """apply(x, bias, scale), or apply(x) for relu: apply costs 0.2 us an
    argument, None and numbers too."""

    @staticmethod
    def forward(ctx, x, bias=None, scale=1.0):
        y, mask = _bias_scale_relu_forward(x, bias, scale, want_mask=True)
        ctx.save_for_backward(mask)
        ctx.config = (scale, None if bias is None else bias.dtype)
        return y

    @staticmethod
    def backward(ctx, dy):
        (mask,) = ctx.saved_tensors
        scale, bias_dtype = ctx.config
        wants = ctx.needs_input_grad  # x[, bias, scale]
        want_bias = bias_dtype is not None and wants[1]
        dx, dbias = _bias_scale_relu_backward(dy, mask, scale, wants[0], bias_dtype if want_bias else None)
        return (dx, dbias, None)[:len(wants)]


def _check_bias_scale_relu(fn, x, bias, scale):
    """scale as a float, once the arguments pass every check. The common
    case (a float scale, bias of x's device and last dimension) is told in
    a few attribute reads; anything else takes the full checks, which raise
    with a message that names the problem."""
    if (
        type(scale) is float and -math.inf < scale < math.inf
        and isinstance(x, Tensor) and (x.is_cpu or x.is_cuda) and (dtype := x.dtype) in DTYPE_CODES
        and (bias is None or (
            isinstance(bias, Tensor) and param_dtype_ok(bias.dtype, dtype) and bias.device == x.device
            and (shape := x.shape) and bias.shape == (shape[-1],)
        ))
    ):
        return scale
    return _check_bias_scale_relu_fully(fn, x, bias, scale)


def _check_bias_scale_relu_fully(fn, x, bias, scale):
    _args.check_tensor(fn, "x", x)
    _args.check_finite_number(fn, "scale", scale)
    if bias is not None:
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
    return float(scale)


def fused_bias_scale_relu(x, bias, scale=1.0):
    """relu(x * scale + bias), with bias of shape [N] broadcast over the last
    dimension N of x. Gradients flow to x and bias."""
    scale = _check_bias_scale_relu("fused_bias_scale_relu", x, bias, scale)
    if _ops.compiling():
        return torch.ops.fused_ops_py.bias_scale_relu(x, bias, scale, _wants_grad(x, bias))[0]
    if _wants_grad(x, bias):
        return BiasScaleReLUFunction.apply(x, bias, scale)
    return _bias_scale_relu_forward(x, bias, scale, want_mask=False)[0]


def relu(x):
    """max(x, 0), elementwise; NaN stays NaN as in torch.relu."""
    _args.check_tensor("relu", "x", x)
    if _ops.compiling():
        return torch.ops.fused_ops_py.bias_scale_relu(x, None, 1.0, _wants_grad(x))[0]
    if torch.is_grad_enabled() and x.requires_grad:
        return BiasScaleReLUFunction.apply(x)
    return _bias_scale_relu_forward(x, None, 1.0, want_mask=False)[0]


# square ---------------------------------------------------------------------
# Backward needs x (dx = 2 x dy), so forward saves x itself: no extra bytes.


def _square_forward(x):
    x_view, rows, cols, x_stride = as_rows(x)
    y = dense_like(x)
    device = device_args(x)
    status = lib.fo_square_forward(
        *device, y.data_ptr(), x_view.data_ptr(), x_stride, rows, cols, DTYPE_CODES[x.dtype],
    )
    if status or SYNC:
        finish(lib.fo_square_forward, status, device)
    return y


def _square_backward(dy, x):
    x_view, rows, cols, x_stride = as_rows(x)
    dy_view, _, _, dy_stride = as_rows(dy)
    dx = dense_like(x)
    device = device_args(x)
    status = lib.fo_square_backward(
        *device, dx.data_ptr(), dy_view.data_ptr(), dy_stride,
        x_view.data_ptr(), x_stride, rows, cols, DTYPE_CODES[x.dtype],
    )
    if status or SYNC:
        finish(lib.fo_square_backward, status, device)
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
    if torch.is_grad_enabled() and x.requires_grad:
        return SquareFunction.apply(x)
    return _square_forward(x)


# reduce_sum -----------------------------------------------------------------


def _reduce_sum(x):
    dense = x.contiguous()
    out = x.new_empty(())
    device = device_args(x)
    code = DTYPE_CODES[x.dtype]
    numel = x.numel()
    scratch = _args.workspace(lib.fo_reduce_sum_workspace_bytes, device[0], numel, code, like=x)
    status = lib.fo_reduce_sum(
        *device, out.data_ptr(), scratch.data_ptr() if scratch is not None else 0,
        scratch.numel() if scratch is not None else 0, dense.data_ptr(), numel, code,
    )
    if status or SYNC:
        finish(lib.fo_reduce_sum, status, device)
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
    if torch.is_grad_enabled() and x.requires_grad:
        return ReduceSumFunction.apply(x)
    return _reduce_sum(x)


# swiglu ---------------------------------------------------------------------
# Backward needs gate and up themselves, so forward saves those (the
# caller's own tensors: no extra memory) and not its output.


def _check_swiglu(fn, gate, up):
    """The common case (gate and up of one dtype, device and shape) is told
    in a few attribute reads; anything else takes the full checks, which
    raise with a message that names the problem."""
    if (
        isinstance(gate, Tensor) and (gate.is_cpu or gate.is_cuda) and (dtype := gate.dtype) in DTYPE_CODES
        and isinstance(up, Tensor) and up.dtype is dtype and up.device == gate.device and up.shape == gate.shape
    ):
        return
    _check_swiglu_fully(fn, gate, up)


def _check_swiglu_fully(fn, gate, up):
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
    device = device_args(gate)
    status = lib.fo_swiglu_forward(
        *device, y.data_ptr(), gate_view.data_ptr(), gate_stride,
        up_view.data_ptr(), up_stride, rows, cols, DTYPE_CODES[gate.dtype],
    )
    if status or SYNC:
        finish(lib.fo_swiglu_forward, status, device)
    return y


def _swiglu_backward(dy, gate, up, want_gate, want_up):
    """(dgate or None, dup or None)."""
    gate_view, rows, cols, gate_stride = as_rows(gate)
    up_view, _, _, up_stride = as_rows(up)
    dy_view, _, _, dy_stride = as_rows(dy)
    dgate = dense_like(gate) if want_gate else None
    dup = dense_like(gate) if want_up else None
    device = device_args(gate)
    status = lib.fo_swiglu_backward(
        *device, dgate.data_ptr() if dgate is not None else 0, dup.data_ptr() if dup is not None else 0,
        dy_view.data_ptr(), dy_stride, gate_view.data_ptr(), gate_stride, up_view.data_ptr(), up_stride,
        rows, cols, DTYPE_CODES[gate.dtype],
    )
    if status or SYNC:
        finish(lib.fo_swiglu_backward, status, device)
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
