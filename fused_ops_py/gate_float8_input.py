"""act(gate) * up handed to a tensorwise Float8Linear (a gated MLP's down
projection) in FP8, straight from the gate's fused cast: the 16-bit product
is never written, nor read again to be cast.

The product's place in autograd is a stand-in of its shape and dtype that
holds no memory (one element, expanded): Float8Linear reads only the FP8
bytes, their transposed copy and the scale (tensorwise never reads `hp`), and
its input gradient arrives at the stand-in, from where the gate's backward
takes it to gate and up, saved as the gate's own backward saves them. Only a
caller that hands the product to nothing but the Float8Linear may use it
(patch's MLP forwards, which own it)."""

import torch

from .float8_linear import Float8Input, Float8Linear
from .ops.geglu import fused_geglu, geglu_backward
from .ops.swiglu import fused_swiglu, swiglu_backward


def _cast(gate, up, approximate, transpose):
    """(data, scale, data_t or None): the gate's tensorwise e4m3 output."""
    kw = dict(fp8="tensorwise", transpose=transpose)
    out = fused_swiglu(gate, up, **kw) if approximate is None else fused_geglu(gate, up, approximate, **kw)
    return out if transpose else (*out, None)


class GateToFloat8Function(torch.autograd.Function):
    """apply(gate, up, approximate, transpose, over_inputs) -> (stand-in,
    data, scale, data_t): approximate None is SiLU, else GELU's ("tanh",
    "none"); over_inputs: backward writes the gradients over gate and up
    (SiLU: the caller's temporaries)."""

    @staticmethod
    def forward(ctx, gate, up, approximate, transpose, over_inputs):
        ctx.save_for_backward(gate, up)
        ctx.gate = approximate, over_inputs
        data, scale, data_t = _cast(gate, up, approximate, transpose)
        ctx.mark_non_differentiable(*(t for t in (data, scale, data_t) if t is not None))
        return gate.new_empty(()).expand(gate.shape), data, scale, data_t

    @staticmethod
    def backward(ctx, dy, *_):
        gate, up = ctx.saved_tensors
        approximate, over_inputs = ctx.gate
        want_gate, want_up = ctx.needs_input_grad[:2]
        dy = dy.contiguous()
        if approximate is None:
            dgate, dup = swiglu_backward(dy, gate, up, want_gate, want_up, over_inputs=over_inputs)
        else:
            dgate, dup = geglu_backward(dy, gate, up, approximate, want_gate, want_up)
        return dgate, dup, None, None, None


def takes_gate_float8(linear):
    """Whether gate_float8_input may feed `linear`: a tensorwise Float8Linear."""
    return type(linear) is Float8Linear and linear.recipe == "tensorwise"


def gate_float8_input(gate, up, approximate, linear, over_inputs=False):
    """The Float8Input of act(gate) * up for `linear` (takes_gate_float8):
    with its transposed copy when linear's weight gradient will be taken,
    and a stand-in that carries the product's dtype, and its gradient where
    one must reach gate or up."""
    grad = torch.is_grad_enabled()
    transpose = grad and linear.weight.requires_grad
    if grad and (gate.requires_grad or up.requires_grad):
        stand_in, data, scale, data_t = GateToFloat8Function.apply(gate, up, approximate, transpose, over_inputs)
    else:
        data, scale, data_t = _cast(gate, up, approximate, transpose)
        stand_in = gate.new_empty(()).expand(gate.shape)
    return Float8Input(data, scale, stand_in, data_t)
