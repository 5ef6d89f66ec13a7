"""transformers' grouped_mm experts (stacked gate_up [E, 2I, H] and down
[E, H, I] weights, no bias) as one autograd Function that keeps, of each
call's (tokens x top-k) rows, only the up projection's output for backward:
the tokens gathered for their experts are gathered again, the SwiGLU is
recomputed from the projection, and the routing weights' gradient comes
from the down projection's input gradient (<dY, A W^T> = <dY W, A>), so the
down projection's output is never kept. Forward computes what
transformers' grouped_mm_experts_forward does, with torch's grouped_mm."""

import torch

from .._core import compiling
from ..ops import swiglu

_grouped_mm = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def _expert_order(top_k_index, num_experts):
    """(each row's token, the rows sorted by expert, the group offsets), as
    transformers' grouped_mm_experts_forward makes them."""
    expert_ids, perm = torch.sort(top_k_index.reshape(-1))
    on_cpu = expert_ids.device.type in ("cpu", "mps")  # histc takes floats there, ints on CUDA
    counts = torch.histc(
        expert_ids.float() if on_cpu else expert_ids.int(), bins=num_experts, min=0, max=num_experts - 1
    )
    return perm // top_k_index.shape[-1], perm, torch.cumsum(counts, dim=0, dtype=torch.int32)


def _token_sum(rows, perm, tokens, top_k):
    """Rows in expert order back in token order, summed over each token's
    top-k: transformers' deterministic reshape + sum (no atomics)."""
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel(), device=perm.device)
    return rows[inverse].view(tokens, top_k, -1).sum(dim=1)


def _gate(projected):
    gate, up = projected.chunk(2, dim=-1)
    return swiglu.swiglu_forward("fused_swiglu", gate, up)


class GroupedExpertsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, gate_up, down, top_k_index, top_k_weights):
        tokens, top_k = top_k_index.shape
        token_of, perm, offsets = _expert_order(top_k_index, gate_up.shape[0])
        weights = top_k_weights.reshape(-1)[perm]
        projected = _grouped_mm(hidden[token_of].to(gate_up.dtype), gate_up.transpose(-2, -1), offs=offsets)
        out = _grouped_mm(_gate(projected), down.transpose(-2, -1), offs=offsets) * weights.unsqueeze(-1)
        ctx.save_for_backward(hidden, gate_up, down, token_of, perm, offsets, weights, projected)
        ctx.top_k = top_k
        return _token_sum(out, perm, tokens, top_k).to(hidden.dtype)

    @staticmethod
    def backward(ctx, d_out):
        hidden, gate_up, down, token_of, perm, offsets, weights, projected = ctx.saved_tensors
        want_hidden, want_gate_up, want_down, _, want_weights = ctx.needs_input_grad
        column = weights.unsqueeze(-1)
        d_rows = d_out.to(projected.dtype)[token_of]  # each row's share of its token's gradient
        d_gated = _grouped_mm(d_rows, down, offs=offsets)  # before the routing weight
        gated = _gate(projected)
        d_weights = torch.linalg.vecdot(d_gated, gated) if want_weights else None
        d_down = _grouped_mm(d_rows.t(), gated.mul_(column), offs=offsets) if want_down else None
        del d_rows, gated
        gate, up = projected.chunk(2, dim=-1)
        d_projected = torch.cat(swiglu.swiglu_backward(d_gated.mul_(column), gate, up, True, True), dim=-1)
        del d_gated
        d_gate_up = d_hidden = None
        if want_gate_up:
            d_gate_up = _grouped_mm(d_projected.t(), hidden[token_of].to(projected.dtype), offs=offsets)
        if want_hidden:
            d_rows = _grouped_mm(d_projected, gate_up, offs=offsets)
            del d_projected
            d_hidden = _token_sum(d_rows, perm, hidden.shape[0], ctx.top_k).to(hidden.dtype)
        if d_weights is not None:
            unsorted = torch.empty_like(d_weights)
            unsorted[perm] = d_weights
            d_weights = unsorted.view(-1, ctx.top_k).to(weights.dtype)
        return d_hidden, d_gate_up, d_down, None, d_weights


def usable(experts, hidden, top_k_index):
    """Whether this call of an experts module that transformers would run
    with grouped_mm can take GroupedExpertsFunction."""
    from transformers.integrations import moe

    weight = experts.gate_up_proj
    return (
        _grouped_mm is not None
        and torch.is_grad_enabled()
        and not compiling()
        and not getattr(experts, "_is_expert_parallel", False)
        and hidden.dim() == 2
        and top_k_index.dim() == 2
        and hidden.dtype == weight.dtype
        and moe._can_use_grouped_mm(hidden, weight, torch.empty(0, dtype=torch.int32, device=hidden.device))
    )
