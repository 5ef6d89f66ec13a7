"""The elementwise ops and the sum: the public functions. Each takes one of
three paths: the registered op while torch.compile traces, the
autograd.Function when a gradient is wanted, else the raw call (no autograd
bookkeeping, no saved state)."""

import torch

from . import _args, _calls
from ._autograd import (
    apply_bias_scale_relu,
    apply_clamped_swiglu,
    apply_geglu,
    apply_reduce_sum,
    apply_rope,
    apply_square,
    apply_swiglu,
)
from ._ops import compiling


def _wants_grad(x, other=None):
    """Whether autograd must record the call (inference skips its cost)."""
    return torch.is_grad_enabled() and (x.requires_grad or (other is not None and other.requires_grad))


def _bias_scale_relu(fn, x, bias, scale):
    if compiling():
        scale = _calls.check_bias_scale_relu(fn, x, bias, scale)
        return torch.ops.fused_ops_py.bias_scale_relu(x, bias, scale, _wants_grad(x, bias))[0]
    try:
        wants_grad = _wants_grad(x, bias)
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_bias_scale_relu(x, bias, (fn, scale))
    return _calls.bias_scale_relu_forward(fn, x, bias, scale, want_mask=False)[0]


def fused_bias_scale_relu(x, bias, scale=1.0):
    """relu(x * scale + bias), with bias of shape [N] broadcast over the last
    dimension N of x. Gradients flow to x and bias."""
    return _bias_scale_relu("fused_bias_scale_relu", x, bias, scale)


def relu(x):
    """max(x, 0), elementwise; NaN stays NaN as in torch.relu."""
    return _bias_scale_relu("relu", x, None, 1.0)


def square(x):
    """x * x, elementwise."""
    _args.check_tensor("square", "x", x)
    if compiling():
        return torch.ops.fused_ops_py.square(x)
    if _wants_grad(x):
        return apply_square(x)
    return _calls.square_forward(x)


def reduce_sum(x):
    """The sum of all elements as a 0-d tensor of x's dtype, accumulated in
    fp32 (fp64 for fp64) in a fixed order: the same bits on every run."""
    _args.check_tensor("reduce_sum", "x", x)
    if compiling():
        return torch.ops.fused_ops_py.reduce_sum(x)
    if _wants_grad(x):
        return apply_reduce_sum(x)
    return _calls.reduce_sum(x)


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
        _calls.check_swiglu(fn, gate, up)
        return torch.ops.fused_ops_py.swiglu(gate, up)
    try:
        wants_grad = _wants_grad(gate, up)
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_swiglu(gate, up, over_inputs)
    return _calls.swiglu_forward(fn, gate, up)


def fused_geglu(gate, up, approximate="tanh"):
    """gelu(gate, approximate=approximate) * up, elementwise (the gated MLP
    of Gemma-style models); approximate is "tanh" (the default here, as
    Gemma's gelu_pytorch_tanh) or "none" (erf); gate and up have one shape
    and dtype. Gradients flow to both."""
    fn = "fused_geglu"
    if compiling():
        _calls.check_geglu(fn, gate, up, approximate)
        return torch.ops.fused_ops_py.geglu(gate, up, approximate)
    try:
        wants_grad = _wants_grad(gate, up)
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_geglu(gate, up, approximate)
    return _calls.geglu_forward(fn, gate, up, approximate)[0]


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
        _calls.check_clamped_swiglu(fn, gate_up, alpha, limit, interleaved)
        return torch.ops.fused_ops_py.clamped_swiglu(gate_up, float(alpha), float(limit), interleaved)
    try:
        wants_grad = _wants_grad(gate_up)
    except AttributeError:  # not a tensor: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        return apply_clamped_swiglu(gate_up, alpha, limit, interleaved)
    return _calls.clamped_swiglu_forward(fn, gate_up, alpha, limit, interleaved)


def fused_rope(q, k, cos, sin, unsqueeze_dim=1, interleaved=False):
    """(q_embed, k_embed) = Hugging Face's apply_rotary_pos_emb(q, k, cos,
    sin, unsqueeze_dim=unsqueeze_dim), with partial rotary: the first
    cos.shape[-1] dimensions of each head are rotated, the rest pass
    through. The rotated pairs are (i, i + rotary_dim / 2) (rotate_half,
    Llama's), or with interleaved=True (2i, 2i + 1) (Cohere's and GLM's
    rotate_half: x * cos + rotate_half(x) * sin with
    rotate_half(x)[2i] = -x[2i + 1], rotate_half(x)[2i + 1] = x[2i]).
    q is [B, Hq, T, D] and k [B, Hk, T, D] ([B, T, H, D] with
    unsqueeze_dim=2), read in place through their strides; cos and sin are
    [B, T, Dr], [1, T, Dr] or [T, Dr] of q's dtype or float32. One kernel
    for q and k. Gradients flow to q and k, not to cos and sin."""
    _calls.check_rope("fused_rope", q, k, cos, sin, unsqueeze_dim, interleaved)
    if compiling():
        return torch.ops.fused_ops_py.rope(q, k, cos, sin, unsqueeze_dim, interleaved)
    if _wants_grad(q, k):
        return apply_rope(q, k, cos, sin, unsqueeze_dim, interleaved)
    return _calls.rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved)
