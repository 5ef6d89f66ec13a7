"""The ops registered with torch.library (torch >= 2.4), for torch.compile.

Under torch.compile each public function calls its registered op, which
dynamo keeps as one graph node: a schema, a fake implementation that
allocates like the real one, and autograd through the same `*_save` and
`*_grads` functions as the eager path (_autograd.py), with the registered
backward op in place of the raw call. The public function has checked the
arguments before it calls the op, so the fakes only allocate. In eager mode
the public functions skip all this: dispatching through a custom op costs
about 20 us a call, more than the kernel of a small tensor.

Dropout under torch.compile takes its seed from torch's CPU generator (a
tensor input, so the graph stays pure); torch.manual_seed still reproduces
it."""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _autograd, _calls

AVAILABLE = hasattr(torch.library, "custom_op") and hasattr(torch, "compiler")

# True while dynamo traces, when the public functions call the ops.
# torch.compiler.is_compiling itself, not a function around it: one call
# less on every eager call, and dynamo knows the very object.
compiling = torch.compiler.is_compiling if AVAILABLE else (lambda: False)


def _empty(like):
    return like.new_empty(0)


def _or_empty(tensor, like):
    return tensor if tensor is not None else _empty(like)


def norm_seed_offset(dropout_p):
    """The dropout stream of a compiled call: drawn from torch's CPU
    generator as a tensor, so tracing keeps it a graph input; None without
    dropout (a CPU tensor in the graph would keep CUDA graphs away)."""
    if dropout_p > 0:
        return torch.randint(0, 2**62, (2,), dtype=torch.int64)
    return None


if AVAILABLE:
    custom_op = torch.library.custom_op

    # the norm family --------------------------------------------------------------

    @custom_op("fused_ops_py::norm", mutates_args=())
    def norm(
        x: Tensor, residual: Optional[Tensor], weight: Optional[Tensor], bias: Optional[Tensor],
        kind: int, eps: float, dropout_p: float, normalized_shape: List[int], seed_offset: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor, Tensor]:
        y, residual_out, stats, _, _, _ = _calls.norm_forward(
            "fused_ops_py::norm", kind, x, residual, weight, bias, eps, dropout_p, tuple(normalized_shape),
            True, seed_offset,
        )
        return y, _or_empty(residual_out, x), stats

    @norm.register_fake
    def _(x, residual, weight, bias, kind, eps, dropout_p, normalized_shape, seed_offset):
        cols = math.prod(normalized_shape)
        rows = x.numel() // cols if cols else math.prod(x.shape[: x.dim() - len(normalized_shape)])
        stats = x.new_empty(rows if kind == _calls.RMS else 2 * rows, dtype=_calls.stats_dtype(x.dtype))
        residual_out = residual.new_empty(residual.shape) if residual is not None else _empty(x)
        return x.new_empty(x.shape), residual_out, stats

    @custom_op("fused_ops_py::norm_backward", mutates_args=())
    def norm_backward(
        dy: Tensor, dresidual_out: Optional[Tensor], h: Tensor, stats: Tensor,
        weight: Optional[Tensor], bias: Optional[Tensor], kind: int, dropout_p: float, cols: int,
        seed_offset: Optional[Tensor], x_dtype: torch.dtype, has_residual: bool,
        want_x: bool, want_residual: bool, want_weight: bool, want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        grads = _calls.norm_backward(
            dy, dresidual_out, h, stats, weight, bias, kind, dropout_p, cols, seed_offset,
            x_dtype, has_residual, want_x, want_residual, want_weight, want_bias,
        )
        return tuple(_or_empty(g, h) for g in grads)

    @norm_backward.register_fake
    def _(dy, dresidual_out, h, stats, weight, bias, kind, dropout_p, cols, seed_offset,
          x_dtype, has_residual, want_x, want_residual, want_weight, want_bias):
        return (
            h.new_empty(h.shape, dtype=x_dtype) if want_x else _empty(h),
            h.new_empty(h.shape) if want_residual else _empty(h),
            weight.new_empty(weight.shape) if want_weight else _empty(h),
            bias.new_empty(bias.shape) if want_bias else _empty(h),
        )

    def _norm_setup(ctx, inputs, output):
        x, residual, weight, bias, kind, _, dropout_p, normalized_shape, seed_offset = inputs
        _, residual_out, stats = output
        _autograd.norm_save(ctx, x, residual, residual_out, stats, weight, bias, kind, dropout_p,
                            math.prod(normalized_shape), seed_offset)

    def _norm_grad(ctx, dy, dresidual_out, _dstats):
        grads = _autograd.norm_grads(torch.ops.fused_ops_py.norm_backward, ctx, dy, dresidual_out)
        return (*grads, None, None, None, None, None)

    norm.register_autograd(_norm_grad, setup_context=_norm_setup)

    # relu(x * scale + bias) -----------------------------------------------------------

    @custom_op("fused_ops_py::bias_scale_relu", mutates_args=())
    def bias_scale_relu(x: Tensor, bias: Optional[Tensor], scale: float, want_mask: bool) -> Tuple[Tensor, Tensor]:
        y, mask, _ = _calls.bias_scale_relu_forward("fused_ops_py::bias_scale_relu", x, bias, scale, want_mask)
        return y, mask if mask is not None else _empty(x).to(torch.uint8)

    @bias_scale_relu.register_fake
    def _(x, bias, scale, want_mask):
        cols = x.shape[-1] if x.dim() else 1
        rows = x.numel() // cols if cols else math.prod(x.shape[:-1])
        mask_shape = (rows, (cols + 7) // 8) if want_mask else (0,)
        return x.new_empty(x.shape), x.new_empty(mask_shape, dtype=torch.uint8)

    @custom_op("fused_ops_py::bias_scale_relu_backward", mutates_args=())
    def bias_scale_relu_backward(
        dy: Tensor, mask: Tensor, scale: float, want_dx: bool, bias_dtype: Optional[torch.dtype]
    ) -> Tuple[Tensor, Tensor]:
        dx, dbias = _calls.bias_scale_relu_backward(dy, mask, scale, want_dx, bias_dtype)
        return _or_empty(dx, dy), _or_empty(dbias, dy)

    @bias_scale_relu_backward.register_fake
    def _(dy, mask, scale, want_dx, bias_dtype):
        dx = dy.new_empty(dy.shape) if want_dx else _empty(dy)
        dbias = dy.new_empty(dy.shape[-1:], dtype=bias_dtype) if bias_dtype is not None else _empty(dy)
        return dx, dbias

    def _bias_scale_relu_setup(ctx, inputs, output):
        _, bias, scale, _ = inputs
        _autograd.bias_scale_relu_save(ctx, bias, scale, output[1])

    def _bias_scale_relu_grad(ctx, dy, _dmask):
        dx, dbias = _autograd.bias_scale_relu_grads(torch.ops.fused_ops_py.bias_scale_relu_backward, ctx, dy)
        return dx, dbias, None, None

    bias_scale_relu.register_autograd(_bias_scale_relu_grad, setup_context=_bias_scale_relu_setup)

    # square ---------------------------------------------------------------------------

    @custom_op("fused_ops_py::square", mutates_args=())
    def square(x: Tensor) -> Tensor:
        return _calls.square_forward(x)

    @square.register_fake
    def _(x):
        return x.new_empty(x.shape)

    @custom_op("fused_ops_py::square_backward", mutates_args=())
    def square_backward(dy: Tensor, x: Tensor) -> Tensor:
        return _calls.square_backward(dy, x)

    @square_backward.register_fake
    def _(dy, x):
        return x.new_empty(x.shape)

    def _square_setup(ctx, inputs, output):
        _autograd.square_save(ctx, inputs[0])

    def _square_grad(ctx, dy):
        return _autograd.square_grads(torch.ops.fused_ops_py.square_backward, ctx, dy)

    square.register_autograd(_square_grad, setup_context=_square_setup)

    # reduce_sum -----------------------------------------------------------------------

    @custom_op("fused_ops_py::reduce_sum", mutates_args=())
    def reduce_sum(x: Tensor) -> Tensor:
        return _calls.reduce_sum(x)

    @reduce_sum.register_fake
    def _(x):
        return x.new_empty(())

    def _reduce_sum_setup(ctx, inputs, output):
        _autograd.reduce_sum_save(ctx, inputs[0])

    reduce_sum.register_autograd(_autograd.reduce_sum_grads, setup_context=_reduce_sum_setup)

    # swiglu ---------------------------------------------------------------------------

    @custom_op("fused_ops_py::swiglu", mutates_args=())
    def swiglu(gate: Tensor, up: Tensor) -> Tensor:
        return _calls.swiglu_forward("fused_ops_py::swiglu", gate, up)

    @swiglu.register_fake
    def _(gate, up):
        return gate.new_empty(gate.shape)

    @custom_op("fused_ops_py::swiglu_backward", mutates_args=())
    def swiglu_backward(dy: Tensor, gate: Tensor, up: Tensor, want_gate: bool, want_up: bool) -> Tuple[Tensor, Tensor]:
        dgate, dup = _calls.swiglu_backward(dy, gate, up, want_gate, want_up)
        return _or_empty(dgate, gate), _or_empty(dup, gate)

    @swiglu_backward.register_fake
    def _(dy, gate, up, want_gate, want_up):
        return (gate.new_empty(gate.shape) if want_gate else _empty(gate),
                gate.new_empty(gate.shape) if want_up else _empty(gate))

    def _swiglu_setup(ctx, inputs, output):
        _autograd.swiglu_save(ctx, *inputs)

    def _swiglu_grad(ctx, dy):
        return _autograd.swiglu_grads(torch.ops.fused_ops_py.swiglu_backward, ctx, dy)

    swiglu.register_autograd(_swiglu_grad, setup_context=_swiglu_setup)

    # geglu ----------------------------------------------------------------------------

    @custom_op("fused_ops_py::geglu", mutates_args=())
    def geglu(gate: Tensor, up: Tensor, approximate: str) -> Tensor:
        return _calls.geglu_forward("fused_ops_py::geglu", gate, up, approximate)[0]

    @geglu.register_fake
    def _(gate, up, approximate):
        return gate.new_empty(gate.shape)

    @custom_op("fused_ops_py::geglu_backward", mutates_args=())
    def geglu_backward(dy: Tensor, gate: Tensor, up: Tensor, approximate: str, want_gate: bool,
                       want_up: bool) -> Tuple[Tensor, Tensor]:
        dgate, dup = _calls.geglu_backward(dy, gate, up, approximate, want_gate, want_up)
        return _or_empty(dgate, gate), _or_empty(dup, gate)

    @geglu_backward.register_fake
    def _(dy, gate, up, approximate, want_gate, want_up):
        return (gate.new_empty(gate.shape) if want_gate else _empty(gate),
                gate.new_empty(gate.shape) if want_up else _empty(gate))

    def _geglu_setup(ctx, inputs, output):
        _autograd.geglu_save(ctx, *inputs)

    def _geglu_grad(ctx, dy):
        return (*_autograd.geglu_grads(torch.ops.fused_ops_py.geglu_backward, ctx, dy), None)

    geglu.register_autograd(_geglu_grad, setup_context=_geglu_setup)

    # clamped swiglu -------------------------------------------------------------------

    @custom_op("fused_ops_py::clamped_swiglu", mutates_args=())
    def clamped_swiglu(gate_up: Tensor, alpha: float, limit: float, interleaved: bool) -> Tensor:
        return _calls.clamped_swiglu_forward("fused_ops_py::clamped_swiglu", gate_up, alpha, limit, interleaved)

    @clamped_swiglu.register_fake
    def _(gate_up, alpha, limit, interleaved):
        return gate_up.new_empty((*gate_up.shape[:-1], gate_up.shape[-1] // 2))

    @custom_op("fused_ops_py::clamped_swiglu_backward", mutates_args=())
    def clamped_swiglu_backward(dy: Tensor, gate_up: Tensor, alpha: float, limit: float,
                                interleaved: bool) -> Tensor:
        return _calls.clamped_swiglu_backward(dy, gate_up, alpha, limit, interleaved)

    @clamped_swiglu_backward.register_fake
    def _(dy, gate_up, alpha, limit, interleaved):
        return gate_up.new_empty(gate_up.shape)

    def _clamped_swiglu_setup(ctx, inputs, output):
        _autograd.clamped_swiglu_save(ctx, *inputs)

    def _clamped_swiglu_grad(ctx, dy):
        return (_autograd.clamped_swiglu_grads(torch.ops.fused_ops_py.clamped_swiglu_backward, ctx, dy),
                None, None, None)

    clamped_swiglu.register_autograd(_clamped_swiglu_grad, setup_context=_clamped_swiglu_setup)

    # rope -----------------------------------------------------------------------------

    @custom_op("fused_ops_py::rope", mutates_args=())
    def rope(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
             interleaved: bool) -> Tuple[Tensor, Tensor]:
        return _calls.rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved)

    @rope.register_fake
    def _(q, k, cos, sin, unsqueeze_dim, interleaved):
        return _calls.rope_output(q), _calls.rope_output(k)

    @custom_op("fused_ops_py::rope_backward", mutates_args=())
    def rope_backward(dq_embed: Tensor, dk_embed: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int,
                      interleaved: bool, want_q: bool, want_k: bool) -> Tuple[Tensor, Tensor]:
        dq, dk = _calls.rope_backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k)
        return _or_empty(dq, dq_embed), _or_empty(dk, dq_embed)

    @rope_backward.register_fake
    def _(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k):
        return (_calls.rope_output(dq_embed) if want_q else _empty(dq_embed),
                _calls.rope_output(dk_embed) if want_k else _empty(dq_embed))

    def _rope_setup(ctx, inputs, output):
        _autograd.rope_save(ctx, *inputs)

    def _rope_grad(ctx, dq_embed, dk_embed):
        grads = _autograd.rope_grads(torch.ops.fused_ops_py.rope_backward, ctx, dq_embed, dk_embed)
        return (*grads, None, None, None, None)

    rope.register_autograd(_rope_grad, setup_context=_rope_setup)

    # cross-entropy and linear cross-entropy -------------------------------------------
    #
    # Forward returns the gradients (for an incoming gradient of 1) beside the
    # loss; backward multiplies them by the incoming gradient into new tensors
    # (saved tensors may not be mutated here), which Inductor can fuse.

    def _loss_shape(target, reduction):
        return target.shape if reduction == "none" else ()

    def _scaled(grad, dloss):
        """grad times dloss: a scalar, or one value for each row of grad."""
        return (grad * (dloss.unsqueeze(-1) if dloss.dim() else dloss)).to(grad.dtype)

    @custom_op("fused_ops_py::cross_entropy", mutates_args=())
    def cross_entropy(
        logits: Tensor, target: Tensor, ignore_index: int, label_smoothing: float, softcap: float,
        reduction: str, want_grad: bool,
    ) -> Tuple[Tensor, Tensor]:
        loss, dlogits = _calls.cross_entropy_forward("fused_ops_py::cross_entropy", logits, target, ignore_index,
                                                     label_smoothing, softcap, reduction, want_grad)
        return loss, _or_empty(dlogits, logits)

    @cross_entropy.register_fake
    def _(logits, target, ignore_index, label_smoothing, softcap, reduction, want_grad):
        dlogits = logits.new_empty(logits.shape) if want_grad else _empty(logits)
        loss_dtype = _calls.stats_dtype(logits.dtype) if reduction == "none" else logits.dtype
        return logits.new_empty(_loss_shape(target, reduction), dtype=loss_dtype), dlogits

    def _cross_entropy_setup(ctx, inputs, output):
        _autograd.cross_entropy_save(ctx, output[1])

    def _cross_entropy_grad(ctx, dloss, _ddlogits):
        return (_autograd.cross_entropy_grads(_scaled, ctx, dloss), None, None, None, None, None, None)

    cross_entropy.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_setup)

    @custom_op("fused_ops_py::linear_cross_entropy", mutates_args=())
    def linear_cross_entropy(
        x: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, ignore_index: int,
        label_smoothing: float, softcap: float, reduction: str,
        want_input: bool, want_weight: bool, want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        loss, *grads = _calls.linear_cross_entropy_forward(
            x, weight, bias, target, ignore_index, label_smoothing, softcap, reduction,
            want_input, want_weight, want_bias,
        )
        return (loss, *(_or_empty(g, x) for g in grads))

    @linear_cross_entropy.register_fake
    def _(x, weight, bias, target, ignore_index, label_smoothing, softcap, reduction,
          want_input, want_weight, want_bias):
        grads = reduction != "none"
        return (
            x.new_empty(_loss_shape(target, reduction), dtype=_calls.stats_dtype(x.dtype)),
            x.new_empty(x.shape) if grads and want_input else _empty(x),
            weight.new_empty(weight.shape) if grads and want_weight else _empty(x),
            bias.new_empty(bias.shape) if grads and want_bias and bias is not None else _empty(x),
        )

    @custom_op("fused_ops_py::linear_cross_entropy_backward", mutates_args=())
    def linear_cross_entropy_backward(
        dloss: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, ignore_index: int,
        label_smoothing: float, softcap: float, want_input: bool, want_weight: bool, want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        grads = _calls.linear_cross_entropy_backward(
            dloss, x, weight, bias, target, ignore_index, label_smoothing, softcap,
            want_input, want_weight, want_bias,
        )
        return tuple(_or_empty(g, x) for g in grads)

    @linear_cross_entropy_backward.register_fake
    def _(dloss, x, weight, bias, target, ignore_index, label_smoothing, softcap,
          want_input, want_weight, want_bias):
        return (
            x.new_empty(x.shape) if want_input else _empty(x),
            weight.new_empty(weight.shape) if want_weight else _empty(x),
            bias.new_empty(bias.shape) if want_bias and bias is not None else _empty(x),
        )

    def _linear_cross_entropy_setup(ctx, inputs, output):
        x, weight, bias, target, ignore_index, label_smoothing, softcap, reduction = inputs[:8]
        _autograd.linear_cross_entropy_save(ctx, x, weight, bias, target, output[1:],
                                            (ignore_index, label_smoothing, softcap, reduction))

    def _linear_cross_entropy_grad(ctx, dloss, _dx, _dweight, _dbias):
        grads = _autograd.linear_cross_entropy_grads(
            _scaled, torch.ops.fused_ops_py.linear_cross_entropy_backward, ctx, dloss
        )
        return (*grads, None, None, None, None, None, None, None, None)

    linear_cross_entropy.register_autograd(_linear_cross_entropy_grad, setup_context=_linear_cross_entropy_setup)
