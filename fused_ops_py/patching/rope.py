"""Rotary embeddings: a modeling module's apply_rotary_pos_emb (or Llama
4's apply_rotary_emb) through fused_rope, where it and the rotation it
calls are one of the computations below. It is a module-level function, so
every model of that family in the process takes the fused one; it gives
the same values. A function that the `kernels` package wraps in a hub layer
is recognised by the function inside."""

import inspect
import sys
from dataclasses import dataclass

import torch

from ..ops.rope import fused_rope
from ._source import is_known, known

# rotate_half: the pairs (i, i + d/2) (Llama and most others)
_HALVES = known(
    """
    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)
    """
)
# rotate_half: the pairs (2i, 2i + 1) (Cohere, GLM, Helium, Ernie 4.5)
_INTERLEAVED = known(
    """
    def rotate_half(x):
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
        rot_x = torch.stack([-x2, x1], dim=-1).flatten(-2)
        return rot_x
    """,
    """
    def rotate_half(x):
        x1 = x[..., 0::2]
        x2 = x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)
    """,
)


@dataclass(frozen=True)
class _Rope:
    sources: frozenset
    partial: bool = False  # the first cos.shape[-1] dimensions rotated, the rest passed
    table: str = "whole"  # or "half" (one half's table for both), "first half interleaved", "complex"
    rotation: str = "rotate_half"  # the function of the module that rotates (None: none)
    name: str = "apply_rotary_pos_emb"


_ROPES = (
    # all of each head rotated; OLMo's, Cohere's and ModernBERT's round to
    # q's dtype at the end, as the kernel does
    _Rope(
        known(
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
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            dtype = q.dtype
            q = q.float()
            k = k.float()
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            q_embed = q * cos + rotate_half(q) * sin
            k_embed = k * cos + rotate_half(k) * sin
            return (q_embed.to(dtype=dtype), k_embed.to(dtype=dtype))
        """,
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            original_dtype = q.dtype
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            q_embed = q.float() * cos + rotate_half(q.float()) * sin
            k_embed = k.float() * cos + rotate_half(k.float()) * sin
            return (q_embed.to(original_dtype), k_embed.to(original_dtype))
        """,
        )
    ),
    # partial rotary (GPT-NeoX, Phi-3, Qwen3-Next, Nemotron)
    _Rope(
        known(
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
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            rot_dim = cos.shape[-1]
            q, q_pass = (q[..., :rot_dim], q[..., rot_dim:])
            k, k_pass = (k[..., :rot_dim], k[..., rot_dim:])
            q_embed = q * cos + rotate_half(q) * sin
            k_embed = k * cos + rotate_half(k) * sin
            return (torch.cat((q_embed, q_pass), dim=-1), torch.cat((k_embed, k_pass), dim=-1))
        """,
        ),
        partial=True,
    ),
    # the first half of the table repeated pairwise (Helium; Ernie 4.5 in fp32)
    _Rope(
        known(
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
            sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
            q_embed = q * cos + rotate_half(q) * sin
            k_embed = k * cos + rotate_half(k) * sin
            return (q_embed, k_embed)
        """,
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            original_dtype = q.dtype
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
            sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
            q_embed = q.float() * cos + rotate_half(q).float() * sin
            k_embed = k.float() * cos + rotate_half(k).float() * sin
            return (q_embed.to(original_dtype), k_embed.to(original_dtype))
        """,
        ),
        table="first half interleaved",
    ),
    # the same with partial rotary (GLM, GLM-4)
    _Rope(
        known(
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
            sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
            rotary_dim = cos.shape[-1]
            q_rot, q_pass = (q[..., :rotary_dim], q[..., rotary_dim:])
            k_rot, k_pass = (k[..., :rotary_dim], k[..., rotary_dim:])
            q_embed = q_rot * cos + rotate_half(q_rot) * sin
            k_embed = k_rot * cos + rotate_half(k_rot) * sin
            q_embed = torch.cat([q_embed, q_pass], dim=-1)
            k_embed = torch.cat([k_embed, k_pass], dim=-1)
            return (q_embed, k_embed)
        """
        ),
        partial=True,
        table="first half interleaved",
    ),
    # gpt-oss: a table of half the rotated dimensions, for both halves
    _Rope(
        known(
            """
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            cos = cos.unsqueeze(unsqueeze_dim)
            sin = sin.unsqueeze(unsqueeze_dim)
            q_embed = _apply_rotary_emb(q, cos, sin)
            k_embed = _apply_rotary_emb(k, cos, sin)
            return (q_embed, k_embed)
        """
        ),
        table="half",
        rotation="_apply_rotary_emb",
    ),
    # Llama 4: q and k [B, T, H, D] times complex [B, T, D/2] frequencies, in fp32
    _Rope(
        known(
            """
        def apply_rotary_emb(xq, xk, freqs_cis):
            xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
            xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
            xq_out = torch.view_as_real(xq_ * freqs_cis[:, :, None, :]).flatten(3)
            xk_out = torch.view_as_real(xk_ * freqs_cis[:, :, None, :]).flatten(3)
            return (xq_out.type_as(xq), xk_out.type_as(xk))
        """
        ),
        table="complex",
        rotation=None,
        name="apply_rotary_emb",
    ),
)

_HALF_TABLE_ROTATION = known(
    """
    def _apply_rotary_emb(x, cos, sin):
        first_half, second_half = torch.chunk(x, 2, dim=-1)
        first_ = first_half * cos - second_half * sin
        second_ = second_half * cos + first_half * sin
        return torch.cat((first_, second_), dim=-1)
    """
)


def _fits(q, k, cos, sin, unsqueeze_dim, partial, fp32_tables=False):
    """Whether the kernel computes what the original does for these
    arguments (else the original runs): one dtype (or fp32 tables beside
    half q and k, where the original computes in fp32), 4-d q and k with
    contiguous rows, cos and sin of one of the shapes the kernel reads."""
    tables_dtype = cos.dtype == q.dtype or (
        fp32_tables and cos.dtype == torch.float32 and q.dtype in (torch.float16, torch.bfloat16)
    )
    if not (
        q.dtype == k.dtype
        and cos.dtype == sin.dtype
        and tables_dtype
        and q.dim() == 4
        and k.dim() == 4
        and unsqueeze_dim in (1, 2)
        and cos.shape == sin.shape
        and cos.dim() in (2, 3)
        and q.stride(-1) == k.stride(-1) == cos.stride(-1) == sin.stride(-1) == 1
    ):
        return False
    tokens = 2 if unsqueeze_dim == 1 else 1
    rotary = cos.shape[-1]
    return (
        q.shape[tokens] == k.shape[tokens] == cos.shape[-2]
        and q.shape[0] == k.shape[0]
        and q.shape[3] == k.shape[3]
        and (cos.dim() == 2 or cos.shape[0] in (1, q.shape[0]))
        and rotary % 2 == 0
        and 0 < rotary <= q.shape[3]
        and (partial or rotary == q.shape[3])
    )


def _fused(original, rope, interleaved):
    if rope.table == "complex":
        return _fused_complex(original)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        table_cos, table_sin = cos, sin
        if rope.table == "half":
            table_cos, table_sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        elif rope.table == "first half interleaved":
            half = cos.shape[-1] // 2
            table_cos = cos[..., :half].repeat_interleave(2, dim=-1)
            table_sin = sin[..., :half].repeat_interleave(2, dim=-1)
        if _fits(q, k, table_cos, table_sin, unsqueeze_dim, rope.partial):
            return fused_rope(q, k, table_cos, table_sin, unsqueeze_dim, interleaved=interleaved)
        return original(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.fused_ops_py = True
    apply_rotary_pos_emb.__wrapped__ = original  # functools' name for what it replaces
    return apply_rotary_pos_emb


def _fused_complex(original):
    def apply_rotary_emb(xq, xk, freqs_cis):
        if freqs_cis.is_complex() and freqs_cis.dim() == 3:
            # each complex frequency turns a pair (2i, 2i + 1): its parts are the pair's cos and sin
            cos = freqs_cis.real.repeat_interleave(2, dim=-1)
            sin = freqs_cis.imag.repeat_interleave(2, dim=-1)
            if _fits(xq, xk, cos, sin, 2, False, fp32_tables=True):
                return fused_rope(xq, xk, cos, sin, 2, interleaved=True)
        return original(xq, xk, freqs_cis)

    apply_rotary_emb.fused_ops_py = True
    apply_rotary_emb.__wrapped__ = original
    return apply_rotary_emb


# transformers' use_kernel_forward_from_hub (the `kernels` package) makes a
# function an nn.Module whose forward calls it, unless a hub kernel is active
_HUB_WRAPPER_FORWARD = known(
    """
    def forward(self, *args, **kwargs):
        if (active_kernel_funcs := _ACTIVE_KERNEL_FUNCS.get()) is not None:
            if (active_kernel_func := active_kernel_funcs.get(id(self))) is not None:
                kernel_func, forward_func = active_kernel_func
                if torch.compiler.is_compiling():
                    if forward_func is not type(self).forward:
                        return forward_func(self, *args, **kwargs)
                else:
                    return kernel_func(*args, **kwargs)
        return func(*args, **kwargs)
    """
)


def _is_hub_wrapper(value):
    return isinstance(value, torch.nn.Module) and hasattr(type(value), "kernel_layer_name")


def _plain_function(value):
    """The function that a modeling module's rotary entry computes: itself,
    or the function inside a hub wrapper that no kernel replaces; else None."""
    if inspect.isfunction(value):
        return value
    forward = getattr(type(value), "forward", None)
    if not _is_hub_wrapper(value) or "forward" in vars(value) or not is_known(forward, _HUB_WRAPPER_FORWARD):
        return None
    cells = dict(zip(forward.__code__.co_freevars, forward.__closure__ or ()))
    function = cells["func"].cell_contents if "func" in cells else None
    return function if inspect.isfunction(function) else None


def _kernelized(model, wrapper):
    """Whether `kernels.kernelize` gave a module of `model` a hub kernel in
    place of the hub wrapper `wrapper` (the module's own copy of the
    wrapper, of its class, has a forward)."""
    return any(
        type(copy) is type(wrapper) and "forward" in vars(copy)
        for module in model.modules()
        for copy in vars(module).get("_kernel_funcs", {}).values()
    )


def _recognised(modeling, name):
    """(the _Rope, interleaved) of the function `name` of a modeling module
    where it is known, else None."""
    function = _plain_function(getattr(modeling, name))
    rope = next((r for r in _ROPES if r.name == name and is_known(function, r.sources)), None)
    if rope is None:
        return None
    if rope.rotation is None:
        return rope, True
    rotation = getattr(function, "__globals__", {}).get(rope.rotation)
    if rotation is None or rotation is not getattr(modeling, rope.rotation, None):
        return None
    if rope.rotation == "_apply_rotary_emb":
        return (rope, False) if is_known(rotation, _HALF_TABLE_ROTATION) else None
    if is_known(rotation, _HALVES) and rope.table != "first half interleaved":
        return rope, False
    if is_known(rotation, _INTERLEAVED):
        return rope, True
    return None


def _rotary_functions(modeling):
    """The names of a modeling module's rotary functions (apply_rotary_*),
    plain or in a hub wrapper."""
    return [
        name
        for name, value in vars(modeling).items()
        if name.startswith("apply_rotary") and (inspect.isfunction(value) or _is_hub_wrapper(value))
    ]


def patch_rope(model, apply=True):
    """Fuses the rotary functions (apply_rotary_*) of the modeling module of
    each attention module of `model` where they are known (with apply);
    returns (how many functions, the names of those it keeps)."""
    replaced, kept, seen = 0, [], set()
    for module in model.modules():
        modeling = sys.modules.get(type(module).__module__)
        if not type(module).__name__.endswith("Attention") or modeling is None or modeling in seen:
            continue
        seen.add(modeling)
        for name in _rotary_functions(modeling):
            function = getattr(modeling, name)
            if getattr(function, "fused_ops_py", False):
                continue
            recognised = None if _kernelized(model, function) else _recognised(modeling, name)
            if recognised is None:
                kept.append(f"{modeling.__name__}.{name}")
                continue
            if apply:
                setattr(modeling, name, _fused(function, *recognised))
            replaced += 1
    return replaced, kept
