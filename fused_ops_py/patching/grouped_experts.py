"""transformers' grouped_mm experts (stacked gate_up [E, 2I, H] and down
[E, H, I] weights, no bias) with the SwiGLU fused and two fewer tensors of
(tokens x top-k) x hidden kept for backward: the tokens gathered for their
experts are gathered again, and the routing weights' gradient is taken from
the down projection's input gradient (<dY, A W> = <dY W^T, A>), so the down
projection's output is not kept. The GEMMs are torch's grouped_mm, as
transformers calls them; forward computes what transformers' does."""

import torch

from .. import _calls
from .._ops import compiling

_grouped_mm = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def _expert_order(top_k_index, num_experts):
    """(each selection's token, the selections by expert, the group offsets)
    as transformers' grouped_mm_experts_forward makes them."""
    expert_ids, perm = torch.sort(top_k_index.reshape(-1))
    on_cpu = expert_ids.device.type in ("cpu", "mps")  # histc takes floats there, ints on CUDA
    counts = torch.histc(expert_ids.float() if on_cpu else expert_ids.int(), bins=num_experts, min=0,
                         max=num_experts - 1)
    return perm // top_k_index.shape[-1], perm, torch.cumsum(counts, dim=0, dtype=torch.int32)


def _unsorted_sum(sorted_rows, perm, tokens, top_k):
    """Rows ordered by expert back in token order, summed over each token's
    top-k: transformers' deterministic reshape + sum (no atomics)."""
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.numel(), device=perm.device)
    return sorted_rows[inverse].view(tokens, top_k, -1).sum(dim=1)


class GroupedExpertsFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, gate_up, down, top_k_index, top_k_weights):
        tokens, top_k = top_k_index.shape
        token_of, perm, offsets = _expert_order(top_k_index, gate_up.shape[0])
        weights = top_k_weights.reshape(-1)[perm]
        projected = _grouped_mm(hidden[token_of], gate_up.transpose(-2, -1), offs=offsets)
        gate, up = projected.chunk(2, dim=-1)
        gated = _calls.swiglu_forward("fused_swiglu", gate, up)
        out = _grouped_mm(gated, down.transpose(-2, -1), offs=offsets) * weights.unsqueeze(-1)
        ctx.save_for_backward(hidden, gate_up, down, token_of, perm, offsets, weights, projected, gated)
        ctx.top_k = top_k
        return _unsorted_sum(out, perm, tokens, top_k).to(hidden.dtype)

    @staticmethod
    def backward(ctx, d_out):
        hidden, gate_up, down, token_of, perm, offsets, weights, projected, gated = ctx.saved_tensors
        d_weighted = d_out.to(gated.dtype)[token_of]  # each selection's share of its token's gradient
        d_gated_unweighted = _grouped_mm(d_weighted, down, offs=offsets)
        d_weights = (d_gated_unweighted.float() * gated.float()).sum(-1)
        d_down = _grouped_mm(gated.t(), (d_weighted * weights.unsqueeze(-1)).to(gated.dtype),
                             offs=offsets).transpose(-2, -1)
        d_gated = (d_gated_unweighted * weights.unsqueeze(-1)).to(gated.dtype)
        del d_weighted, d_gated_unweighted
        gate, up = projected.chunk(2, dim=-1)
        d_projected = torch.cat(_calls.swiglu_backward(d_gated, gate, up, True, True), dim=-1)
        del d_gated
        d_gate_up = _grouped_mm(hidden[token_of].t(), d_projected, offs=offsets).transpose(-2, -1)
        d_hidden = _unsorted_sum(_grouped_mm(d_projected, gate_up, offs=offsets), perm, hidden.shape[0], ctx.top_k)
        d_top_k_weights = torch.empty_like(d_weights)
        d_top_k_weights[perm] = d_weights
        return (d_hidden.to(hidden.dtype), d_gate_up, d_down, None,
                d_top_k_weights.view(-1, ctx.top_k).to(weights.dtype))


def usable(experts, hidden, top_k_index):
    """Whether this call of an experts module that transformers would run
    with grouped_mm can take GroupedExpertsFunction."""
    from transformers.integrations import moe

    weight = experts.gate_up_proj
    return (_grouped_mm is not None and not compiling() and not getattr(experts, "_is_expert_parallel", False)
            and hidden.dim() == 2 and top_k_index.dim() == 2 and hidden.dtype == weight.dtype
            and moe._can_use_grouped_mm(hidden, weight, torch.empty(0, dtype=torch.int32, device=hidden.device)))
