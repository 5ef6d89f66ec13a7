"""Rotary position embedding of q and k in one call (fo_rope_*)."""

from typing import Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, device_args
from .._core import AVAILABLE, address, compiling, custom_op, eager_apply, empty, new_struct, or_empty, records_grad
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------


# rope: q and k in one call, read in place through their strides (typically
# proj(x).view(B, T, H, D).transpose(1, 2), never copied); backward, the

_ROPE = ffi.typeof("fo_rope_args *")
# unsqueeze_dim -> where the heads are: [B, H, T, D] or [B, T, H, D]
_ROPE_LAYOUTS = {1: lib.FO_ROPE_HEADS_FIRST, 2: lib.FO_ROPE_TOKENS_FIRST}


def check_rope(fn, q, k, cos, sin, unsqueeze_dim, interleaved=False):
    """What only Python can see: tensors on one device, dtypes, and the
    shapes against each other (rotary_dim, cos's last dimension, is the
    library's to check: even, at most head_dim)."""
    if not isinstance(interleaved, bool):
        raise TypeError(f"{fn}: interleaved must be a bool, got {type(interleaved).__name__}")
    _args.check_tensor(fn, "q", q)
    for name, value in (("k", k), ("cos", cos), ("sin", sin)):
        _args.check_companion(fn, name, value, q, "q")
    if isinstance(unsqueeze_dim, bool) or not isinstance(unsqueeze_dim, int):
        raise TypeError(f"{fn}: unsqueeze_dim must be an int, got {type(unsqueeze_dim).__name__}")
    if unsqueeze_dim not in _ROPE_LAYOUTS:
        raise ValueError(
            f"{fn}: unsqueeze_dim={unsqueeze_dim} must be 1 (q and k of [batch, heads, tokens, head_dim]) "
            "or 2 ([batch, tokens, heads, head_dim])"
        )
    if k.dtype != q.dtype:
        raise TypeError(f"{fn}: k has dtype {k.dtype} but q has dtype {q.dtype}; they must match")
    if sin.dtype != cos.dtype:
        raise TypeError(f"{fn}: sin has dtype {sin.dtype} but cos has dtype {cos.dtype}; they must match")
    if cos.dtype != q.dtype and not (cos.dtype == torch.float32 and q.dtype in _args.HALF_DTYPES):
        raise TypeError(
            f"{fn}: cos has dtype {cos.dtype} but q has dtype {q.dtype}; cos and sin take q's dtype, "
            "or float32 beside float16 and bfloat16 q"
        )
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"{fn}: q and k must be 4-d, got shapes {tuple(q.shape)} and {tuple(k.shape)}")
    tokens_dim = 2 if unsqueeze_dim == 1 else 1
    if k.shape[0] != q.shape[0] or k.shape[tokens_dim] != q.shape[tokens_dim] or k.shape[3] != q.shape[3]:
        raise ValueError(
            f"{fn}: k has shape {tuple(k.shape)} but q has shape {tuple(q.shape)}; they must agree but for the heads"
        )
    batch, tokens = q.shape[0], q.shape[tokens_dim]
    if cos.shape != sin.shape:
        raise ValueError(
            f"{fn}: sin has shape {tuple(sin.shape)} but cos has shape {tuple(cos.shape)}; they must match"
        )
    if cos.dim() not in (2, 3) or cos.shape[-2] != tokens or (cos.dim() == 3 and cos.shape[0] not in (1, batch)):
        raise ValueError(
            f"{fn}: cos has shape {tuple(cos.shape)} but must be ({batch}, {tokens}, rotary_dim), "
            f"(1, {tokens}, rotary_dim) or ({tokens}, rotary_dim) for q of shape {tuple(q.shape)} "
            f"(unsqueeze_dim={unsqueeze_dim})"
        )
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise ValueError(
            f"{fn}: cos or sin requires grad, but no gradient flows to them; pass cos.detach() "
            "and sin.detach() (Hugging Face computes them under torch.no_grad)"
        )


def _rows_contiguous(x):
    """x itself where its last dimension is contiguous (the library reads
    every other stride as it is), else a copy (an expanded gradient)."""
    return x.contiguous() if x.shape[-1] > 1 and x.stride(-1) != 1 else x


def _rope_table(table):
    """(table, its strides as (batch, token, rotary dim)): [T, R] or [B or
    1, T, R]; a table without a batch, or of one, is shared: stride 0."""
    table = _rows_contiguous(table)
    batch_stride = table.stride(0) if table.dim() == 3 and table.shape[0] > 1 else 0
    return table, (batch_stride, table.stride(-2), table.stride(-1))


def rope_output(x):
    """An output for x: laid out as x where x's elements are dense and its
    rows contiguous (q as a transposed projection: attention then returns
    its output in that layout too, which the model's transpose back needs
    no copy of), else dense."""
    out = torch.empty_like(x)  # keeps a dense layout, else contiguous
    return out if out.shape[-1] <= 1 or out.stride(-1) == 1 else x.new_empty(x.shape)


def _rope(entry, q, k, cos, sin, unsqueeze_dim, interleaved, want_q, want_k):
    """(q_out or None, k_out or None) in q's and k's shapes, laid out by
    rope_output: entry (fo_rope_forward or fo_rope_backward) of q and k. A
    tensor not wanted is not read."""
    q = _rows_contiguous(q) if want_q else q
    k = _rows_contiguous(k) if want_k else k
    cos, cos_strides = _rope_table(cos)
    sin, sin_strides = _rope_table(sin)
    q_out = rope_output(q) if want_q else None
    k_out = rope_output(k) if want_k else None
    heads_dim, tokens_dim = (1, 2) if unsqueeze_dim == 1 else (2, 1)
    device = device_args(q)
    a = new_struct(
        _ROPE,
        device,
        stream=device[2],
        q_out=address(q_out),
        k_out=address(k_out),
        q=q.data_ptr(),
        k=k.data_ptr(),
        q_strides=q.stride(),
        k_strides=k.stride(),
        cos=cos.data_ptr(),
        sin=sin.data_ptr(),
        cos_strides=cos_strides,
        sin_strides=sin_strides,
        batch=q.shape[0],
        tokens=q.shape[tokens_dim],
        q_heads=q.shape[heads_dim],
        k_heads=k.shape[heads_dim],
        head_dim=q.shape[3],
        rotary_dim=cos.shape[-1],
        layout=_ROPE_LAYOUTS[unsqueeze_dim],
        dtype=DTYPE_CODES[q.dtype],
        cos_dtype=DTYPE_CODES[cos.dtype],
        pairs=lib.FO_ROPE_INTERLEAVED if interleaved else lib.FO_ROPE_HALVES,
        q_out_strides=q_out.stride() if want_q else (0,) * 4,
        k_out_strides=k_out.stride() if want_k else (0,) * 4,
    )
    status = entry(a)
    if status or SYNC:
        finish(entry, status, device)
    return q_out, k_out


def rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved):
    """(q_embed, k_embed), the arguments checked (check_rope)."""
    return _rope(lib.fo_rope_forward, q, k, cos, sin, unsqueeze_dim, interleaved, True, True)


def rope_backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k):
    """(dq or None, dk or None) from the gradients of q_embed and k_embed."""
    return _rope(lib.fo_rope_backward, dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k)


#
# The rotation is linear in q and k: backward needs only cos and sin, never
# q or k. cos and sin get no gradient (check_rope refuses them requiring one).


# autograd ------------------------------------------------------------------------------


def rope_save(ctx, q, k, cos, sin, unsqueeze_dim, interleaved):
    ctx.save_for_backward(cos, sin)
    ctx.rope = (unsqueeze_dim, interleaved, q.shape, k.shape)


def rope_grads(backward, ctx, dq_embed, dk_embed):
    """(dq, dk) from backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim,
    interleaved, want_q, want_k). An output that got no gradient (None) has zeros, as an
    expanded view: it is read only if its input's gradient is wanted."""
    cos, sin = ctx.saved_tensors
    unsqueeze_dim, interleaved, q_shape, k_shape = ctx.rope
    want_q, want_k = ctx.needs_input_grad[:2]
    like = dq_embed if dq_embed is not None else dk_embed
    if like is None:  # neither output had a gradient
        return None, None
    if dq_embed is None:
        dq_embed = like.new_zeros(()).expand(q_shape)
    if dk_embed is None:
        dk_embed = like.new_zeros(()).expand(k_shape)
    dq, dk = backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k)
    return dq if want_q else None, dk if want_k else None


class RoPEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, unsqueeze_dim, interleaved):
        rope_save(ctx, q, k, cos, sin, unsqueeze_dim, interleaved)
        # an unused output gets None, not a zero tensor: rope_grads stands
        # an expanded zero in for it
        ctx.set_materialize_grads(False)
        return rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved)

    @staticmethod
    def backward(ctx, dq_embed, dk_embed):
        return (*rope_grads(rope_backward, ctx, dq_embed, dk_embed), None, None, None, None)


apply_rope = eager_apply(RoPEFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::rope", mutates_args=())
    def rope_op(
        q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int, interleaved: bool
    ) -> Tuple[Tensor, Tensor]:
        return rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved)

    @rope_op.register_fake
    def _(q, k, cos, sin, unsqueeze_dim, interleaved):
        return rope_output(q), rope_output(k)

    @custom_op("fused_ops_py::rope_backward", mutates_args=())
    def rope_backward_op(
        dq_embed: Tensor,
        dk_embed: Tensor,
        cos: Tensor,
        sin: Tensor,
        unsqueeze_dim: int,
        interleaved: bool,
        want_q: bool,
        want_k: bool,
    ) -> Tuple[Tensor, Tensor]:
        dq, dk = rope_backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k)
        return or_empty(dq, dq_embed), or_empty(dk, dq_embed)

    @rope_backward_op.register_fake
    def _(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k):
        return (
            rope_output(dq_embed) if want_q else empty(dq_embed),
            rope_output(dk_embed) if want_k else empty(dq_embed),
        )

    def _rope_setup(ctx, inputs, output):
        rope_save(ctx, *inputs)

    def _rope_grad(ctx, dq_embed, dk_embed):
        grads = rope_grads(torch.ops.fused_ops_py.rope_backward, ctx, dq_embed, dk_embed)
        return (*grads, None, None, None, None)

    rope_op.register_autograd(_rope_grad, setup_context=_rope_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


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
    check_rope("fused_rope", q, k, cos, sin, unsqueeze_dim, interleaved)
    if compiling():
        return torch.ops.fused_ops_py.rope(q, k, cos, sin, unsqueeze_dim, interleaved)
    if records_grad(q, k):
        return apply_rope(q, k, cos, sin, unsqueeze_dim, interleaved)
    return rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved)
