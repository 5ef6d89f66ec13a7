"""Rotary embeddings: a modeling module's apply_rotary_pos_emb through
fused_rope, where it and the rotate_half it calls are the rotate-half
computations below. It is a module-level function, so every model of that
family in the process takes the fused one; it gives the same values."""

import sys

from ..functional import fused_rope
from ._source import is_known, known

_ROTATE_HALF = known(
    """
    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)
    """
)

# all of each head rotated (Llama and most others; OLMo's rounds to q's dtype
# at the end, as the fused kernel does)
_WHOLE_HEAD = known(
    """
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = q * cos + rotate_half(q) * sin
        k_embed = k * cos + rotate_half(k) * sin
        return (q_embed, k_embed)
    """,
    """
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        q_type, k_type = (q.dtype, k.dtype)
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = q * cos + rotate_half(q) * sin
        k_embed = k * cos + rotate_half(k) * sin
        return (q_embed.to(q_type), k_embed.to(k_type))
    """,
)

# the first cos.shape[-1] dimensions of each head rotated (GPT-NeoX, Phi-3, Qwen3-Next)
_PARTIAL = known(
    """
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        rotary_dim = cos.shape[-1]
        q_rot, q_pass = (q[..., :rotary_dim], q[..., rotary_dim:])
        k_rot, k_pass = (k[..., :rotary_dim], k[..., rotary_dim:])
        q_embed = q_rot * cos + rotate_half(q_rot) * sin
        k_embed = k_rot * cos + rotate_half(k_rot) * sin
        q_embed = torch.cat([q_embed, q_pass], dim=-1)
        k_embed = torch.cat([k_embed, k_pass], dim=-1)
        return (q_embed, k_embed)
    """,
    """
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        rotary_dim = cos.shape[-1]
        q_rot, q_pass = (q[..., :rotary_dim], q[..., rotary_dim:])
        k_rot, k_pass = (k[..., :rotary_dim], k[..., rotary_dim:])
        q_embed = torch.cat([q_rot * cos + rotate_half(q_rot) * sin, q_pass], dim=-1)
        k_embed = torch.cat([k_rot * cos + rotate_half(k_rot) * sin, k_pass], dim=-1)
        return (q_embed, k_embed)
    """,
)


def _fits(q, k, cos, sin, unsqueeze_dim, partial):
    """Whether the fused kernel computes what the original does for these
    arguments (else the original runs): one dtype, 4-d q and k, cos and sin
    of one of the shapes the kernel reads."""
    if not (q.dtype == k.dtype == cos.dtype == sin.dtype and q.dim() == 4 and k.dim() == 4
            and unsqueeze_dim in (1, 2) and cos.shape == sin.shape and cos.dim() in (2, 3)):
        return False
    tokens = 2 if unsqueeze_dim == 1 else 1
    rotary = cos.shape[-1]
    return (q.shape[tokens] == k.shape[tokens] == cos.shape[-2] and q.shape[0] == k.shape[0]
            and q.shape[3] == k.shape[3] and (cos.dim() == 2 or cos.shape[0] in (1, q.shape[0]))
            and rotary % 2 == 0 and 0 < rotary <= q.shape[3] and (partial or rotary == q.shape[3]))


def _fused(original, partial):
    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if _fits(q, k, cos, sin, unsqueeze_dim, partial):
            return fused_rope(q, k, cos, sin, unsqueeze_dim)
        return original(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.fused_ops_py = True
    apply_rotary_pos_emb.__wrapped__ = original  # functools' name for what it replaces
    return apply_rotary_pos_emb


def _kind(modeling):
    """'whole' or 'partial' for a modeling module whose apply_rotary_pos_emb
    is known, None otherwise (or when it is fused already)."""
    function = getattr(modeling, "apply_rotary_pos_emb", None)
    if function is None or getattr(function, "fused_ops_py", False):
        return None
    if getattr(function, "__globals__", {}).get("rotate_half") is not getattr(modeling, "rotate_half", None):
        return None
    if not is_known(getattr(modeling, "rotate_half", None), _ROTATE_HALF):
        return None
    if is_known(function, _WHOLE_HEAD):
        return "whole"
    if is_known(function, _PARTIAL):
        return "partial"
    return None


def patch_rope(model, apply=True):
    """Fuses apply_rotary_pos_emb in the modeling module of each attention
    module of `model` where it is known (with apply); returns (how many
    modeling modules, the names of the functions it keeps)."""
    replaced, kept, seen = 0, [], set()
    for module in model.modules():
        modeling = sys.modules.get(type(module).__module__)
        function = getattr(modeling, "apply_rotary_pos_emb", None)
        if not (type(module).__name__.endswith("Attention") and callable(function)) or modeling in seen:
            continue
        seen.add(modeling)
        kind = _kind(modeling)
        if kind is not None:
            if apply:
                modeling.apply_rotary_pos_emb = _fused(function, kind == "partial")
            replaced += 1
        elif not getattr(function, "fused_ops_py", False):
            kept.append(f"{modeling.__name__}.apply_rotary_pos_emb")
    return replaced, kept
