"""The ops registered with torch.library (torch >= 2.4), for torch.compile.

Under torch.compile each public function calls its registered op, which
dynamo keeps as one graph node: a schema, a fake implementation that checks
shapes, dtypes and devices and allocates like the real one, and autograd. In
eager mode the public functions skip all this and go straight to the kernels:
dispatching through a custom op costs about 20 us a call, more than the
kernel of a small tensor.

Dropout under torch.compile takes its seed from torch's CPU generator (a
tensor input, so the graph stays pure); torch.manual_seed still reproduces
it."""

from typing import Optional, Tuple

import torch
from torch import Tensor

AVAILABLE = hasattr(torch.library, "custom_op") and hasattr(torch, "compiler")


# compiling(): True while dynamo traces, when the public functions call the
# ops. torch.compiler.is_compiling itself, not a function around it: one
# call (0.1 us) less on every eager call, and dynamo knows the very object.
compiling = torch.compiler.is_compiling if AVAILABLE else (lambda: False)


def _empty(like):
    return like.new_empty(0)


def _rows(x, cols):
    from ._args import row_count

    return row_count(x, cols)


if AVAILABLE:
    custom_op = torch.library.custom_op

    # relu(x * scale + bias) ------------------------------------------------

    @custom_op("fused_ops_py::bias_scale_relu", mutates_args=())
    def bias_scale_relu(x: Tensor, bias: Optional[Tensor], scale: float, want_mask: bool) -> Tuple[Tensor, Tensor]:
        from . import functional

        y, mask = functional._bias_scale_relu_forward(x, bias, scale, want_mask)
        return y, mask if mask is not None else _empty(x).to(torch.uint8)

    @bias_scale_relu.register_fake
    def _(x, bias, scale, want_mask):
        cols = x.shape[-1] if x.dim() else 1
        if bias is not None:
            torch._check(bias.shape == (cols,), lambda: f"bias shape {bias.shape} != ({cols},)")
            torch._check(bias.device == x.device, lambda: "bias and x on different devices")
        mask_shape = (_rows(x, cols), (cols + 7) // 8) if want_mask else (0,)
        return x.new_empty(x.shape), x.new_empty(mask_shape, dtype=torch.uint8)

    @custom_op("fused_ops_py::bias_scale_relu_backward", mutates_args=())
    def bias_scale_relu_backward(
        dy: Tensor, mask: Tensor, scale: float, bias_dtype: Optional[torch.dtype]
    ) -> Tuple[Tensor, Tensor]:
        from . import functional

        dx, dbias = functional._bias_scale_relu_backward(dy, mask, scale, True, bias_dtype)
        return dx, dbias if dbias is not None else _empty(dy)

    @bias_scale_relu_backward.register_fake
    def _(dy, mask, scale, bias_dtype):
        dbias = dy.new_empty(dy.shape[-1:], dtype=bias_dtype) if bias_dtype is not None else dy.new_empty(0)
        return dy.new_empty(dy.shape), dbias

    def _bias_scale_relu_setup(ctx, inputs, output):
        _, bias, scale, _ = inputs
        ctx.save_for_backward(output[1])
        ctx.scale = scale
        ctx.bias_dtype = None if bias is None else bias.dtype

    def _bias_scale_relu_grad(ctx, dy, _dmask):
        (mask,) = ctx.saved_tensors
        dx, dbias = torch.ops.fused_ops_py.bias_scale_relu_backward(dy, mask, ctx.scale, ctx.bias_dtype)
        return dx, dbias if ctx.bias_dtype is not None else None, None, None

    bias_scale_relu.register_autograd(_bias_scale_relu_grad, setup_context=_bias_scale_relu_setup)

    # square ----------------------------------------------------------------

    @custom_op("fused_ops_py::square", mutates_args=())
    def square(x: Tensor) -> Tensor:
        from . import functional

        return functional._square_forward(x)

    @square.register_fake
    def _(x):
        return x.new_empty(x.shape)

    @custom_op("fused_ops_py::square_backward", mutates_args=())
    def square_backward(dy: Tensor, x: Tensor) -> Tensor:
        from . import functional

        return functional._square_backward(dy, x)

    @square_backward.register_fake
    def _(dy, x):
        torch._check(dy.shape == x.shape, lambda: "dy and x differ in shape")
        return x.new_empty(x.shape)

    def _square_setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    def _square_grad(ctx, dy):
        (x,) = ctx.saved_tensors
        return torch.ops.fused_ops_py.square_backward(dy, x)

    square.register_autograd(_square_grad, setup_context=_square_setup)

    # reduce_sum ------------------------------------------------------------

    @custom_op("fused_ops_py::reduce_sum", mutates_args=())
    def reduce_sum(x: Tensor) -> Tensor:
        from . import functional

        return functional._reduce_sum(x)

    @reduce_sum.register_fake
    def _(x):
        return x.new_empty(())

    def _reduce_sum_setup(ctx, inputs, output):
        ctx.input_shape = inputs[0].shape

    def _reduce_sum_grad(ctx, dy):
        return dy.expand(ctx.input_shape)

    reduce_sum.register_autograd(_reduce_sum_grad, setup_context=_reduce_sum_setup)

    # swiglu ------------------------------------------------------------------

    @custom_op("fused_ops_py::swiglu", mutates_args=())
    def swiglu(gate: Tensor, up: Tensor) -> Tensor:
        from . import functional

        return functional._swiglu_forward(gate, up)

    @swiglu.register_fake
    def _(gate, up):
        torch._check(gate.shape == up.shape, lambda: "gate and up differ in shape")
        return gate.new_empty(gate.shape)

    @custom_op("fused_ops_py::swiglu_backward", mutates_args=())
    def swiglu_backward(dy: Tensor, gate: Tensor, up: Tensor) -> Tuple[Tensor, Tensor]:
        from . import functional

        return functional._swiglu_backward(dy, gate, up, True, True)

    @swiglu_backward.register_fake
    def _(dy, gate, up):
        return gate.new_empty(gate.shape), gate.new_empty(gate.shape)

    def _swiglu_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def _swiglu_grad(ctx, dy):
        return torch.ops.fused_ops_py.swiglu_backward(dy, *ctx.saved_tensors)

    swiglu.register_autograd(_swiglu_grad, setup_context=_swiglu_setup)

    # the norm family -----------------------------------------------------------

    @custom_op("fused_ops_py::norm", mutates_args=())
    def norm(
        x: Tensor, residual: Optional[Tensor], weight: Optional[Tensor], bias: Optional[Tensor],
        kind: int, eps: float, dropout_p: float, cols: int, seed_offset: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        from . import normalization

        if dropout_p > 0:
            normalization.refuse_dropout_in_capture(x.device)
        y, residual_out, (mean, rstd), _, _ = normalization._forward(
            kind, x, residual, weight, bias, eps, dropout_p, cols, _separate_stats,
            seed_offset=tuple(seed_offset.tolist()) if seed_offset is not None else None,
        )
        return y, residual_out if residual_out is not None else _empty(x), mean, rstd

    def _separate_stats(x, rows, kind):
        """mean and rstd as two tensors, as the op returns them (mean empty
        for RMSNorm), for normalization._forward: ((mean, rstd), mean
        address or 0, rstd address)."""
        from . import normalization

        dtype = normalization._stats_dtype(x.dtype)
        mean = x.new_empty(rows if kind == normalization.LAYER else 0, dtype=dtype)
        rstd = x.new_empty(rows, dtype=dtype)
        return (mean, rstd), mean.data_ptr() if mean.numel() else 0, rstd.data_ptr()

    @norm.register_fake
    def _(x, residual, weight, bias, kind, eps, dropout_p, cols, seed_offset):
        from . import normalization

        for name, t in (("residual", residual), ("weight", weight), ("bias", bias)):
            if t is not None:
                torch._check(t.device == x.device, lambda: f"{name} and x on different devices")
        if residual is not None:
            torch._check(residual.shape == x.shape, lambda: "residual and x differ in shape")
        rows = _rows(x, cols)
        stats = normalization._stats_dtype(x.dtype)
        return (
            x.new_empty(x.shape),
            residual.new_empty(residual.shape) if residual is not None else x.new_empty(0),
            x.new_empty(rows if kind == normalization.LAYER else 0, dtype=stats),
            x.new_empty(rows, dtype=stats),
        )

    @custom_op("fused_ops_py::norm_backward", mutates_args=())
    def norm_backward(
        dy: Tensor, dresidual_out: Optional[Tensor], h: Tensor, mean: Tensor, rstd: Tensor,
        weight: Optional[Tensor], bias: Optional[Tensor], kind: int, dropout_p: float, cols: int,
        seed_offset: Optional[Tensor], x_dtype: torch.dtype, has_residual: bool,
        want_x: bool, want_residual: bool, want_weight: bool, want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        from . import normalization

        seed, offset = seed_offset.tolist() if seed_offset is not None else (0, 0)
        grads = normalization._backward(
            dy, dresidual_out, h, mean.data_ptr() if mean.numel() else 0, rstd.data_ptr(), weight, bias, kind,
            dropout_p, seed, offset, cols, x_dtype, has_residual,
            (want_x, want_residual, want_weight, want_bias), share_dx=False,
        )
        return tuple(g if g is not None else _empty(h) for g in grads)

    @norm_backward.register_fake
    def _(dy, dresidual_out, h, mean, rstd, weight, bias, kind, dropout_p, cols, seed_offset,
          x_dtype, has_residual, want_x, want_residual, want_weight, want_bias):
        def maybe(wanted, shape, dtype):
            return h.new_empty(shape, dtype=dtype) if wanted else h.new_empty(0)

        return (
            maybe(want_x, h.shape, x_dtype),
            maybe(has_residual and want_residual, h.shape, h.dtype),
            maybe(weight is not None and want_weight, weight.shape if weight is not None else 0,
                  weight.dtype if weight is not None else h.dtype),
            maybe(bias is not None and want_bias, bias.shape if bias is not None else 0,
                  bias.dtype if bias is not None else h.dtype),
        )

    def _norm_setup(ctx, inputs, output):
        x, residual, weight, bias, kind, _, dropout_p, cols, seed_offset = inputs
        _, residual_out, mean, rstd = output
        h = residual_out if residual is not None else x
        ctx.save_for_backward(h, mean, rstd, weight, bias, seed_offset)
        ctx.config = (kind, dropout_p, cols, x.dtype, residual is not None)

    def _norm_grad(ctx, dy, dresidual_out, _dmean, _drstd):
        h, mean, rstd, weight, bias, seed_offset = ctx.saved_tensors
        kind, dropout_p, cols, x_dtype, has_residual = ctx.config
        wanted = ctx.needs_input_grad[:4]
        if dy is None:
            dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
        grads = torch.ops.fused_ops_py.norm_backward(
            dy, dresidual_out if has_residual else None, h, mean, rstd, weight, bias, kind,
            dropout_p, cols, seed_offset, x_dtype, has_residual,
            wanted[0], has_residual and wanted[1], weight is not None and wanted[2],
            bias is not None and wanted[3],
        )
        dx, dresidual, dweight, dbias = grads
        return (
            dx if wanted[0] else None,
            dresidual if has_residual and wanted[1] else None,
            dweight if weight is not None and wanted[2] else None,
            dbias if bias is not None and wanted[3] else None,
            None, None, None, None, None,
        )

    norm.register_autograd(_norm_grad, setup_context=_norm_setup)


def norm_seed_offset(dropout_p):
    """The dropout stream of a compiled call: drawn from torch's CPU
    generator as a tensor, so tracing keeps it a graph input; None without
    dropout (a CPU tensor in the graph would keep CUDA graphs away)."""
    if dropout_p > 0:
        return torch.randint(0, 2**62, (2,), dtype=torch.int64)
    return None
