"""Gated MLPs and MoE experts: act(gate) * up through fused_swiglu (SiLU) or
fused_geglu (GELU), and gpt-oss's clamped gate through fused_clamped_swiglu,
where the module's forward is one of the computations below and its
activation is one whose function is known. The projections, the experts'
weights and the router stay as they are."""

import functools
import math
import types

import torch
from torch import nn

from .._core import compiling
from ..gate_float8_input import gate_float8_input, takes_gate_float8
from ..ops.clamped_swiglu import fused_clamped_swiglu
from ..ops.geglu import fused_geglu
from ..ops.swiglu import swiglu_over_inputs
from . import grouped_experts
from ._source import is_known, known

_SILU = known("def forward(self, input): return nn.functional.silu(input)")
_GELU_BY_ACT = known("def forward(self, input): return self.act(input)")
_NEW_GELU = known(
    "def forward(self, input): "
    "return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))"
)


def _tanh_gelu(gate, up):
    return fused_geglu(gate, up, approximate="tanh")


def _erf_gelu(gate, up):
    return fused_geglu(gate, up, approximate="none")


def gate_of(activation):
    """The fused act(gate) * up for an activation module whose function is
    known (torch's SiLU and GELU, Hugging Face's silu, gelu,
    gelu_pytorch_tanh and gelu_new), else None."""
    kind = type(activation)
    if kind is nn.SiLU or (kind.__name__ == "SiLUActivation" and is_known(kind.forward, _SILU)):
        # the projections' outputs are this forward's own: their gradients are written over them
        return swiglu_over_inputs
    if kind is nn.GELU:
        return {"tanh": _tanh_gelu, "none": _erf_gelu}.get(activation.approximate)
    if kind.__name__ == "NewGELUActivation" and is_known(kind.forward, _NEW_GELU):
        return _tanh_gelu
    act = getattr(activation, "act", None)
    if kind.__name__ in ("GELUActivation", "GELUTanh") and is_known(kind.forward, _GELU_BY_ACT):
        if act is nn.functional.gelu:
            return _erf_gelu
        if (
            isinstance(act, functools.partial)
            and act.func is nn.functional.gelu
            and not act.args
            and act.keywords == {"approximate": "tanh"}
        ):
            return _tanh_gelu
    return None


# Llama's: down(act(gate(x)) * up(x))
_GATED = known(
    """
    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj
    """
)
# the same, its activation in `activation_fn` (Llama 4)
_GATED_ACTIVATION_FN = known(
    """
    def forward(self, x):
        down_proj = self.activation_fn(self.gate_proj(x)) * self.up_proj(x)
        return self.down_proj(down_proj)
    """
)
# Phi-3's and GLM's: one projection, gate then up
_GATE_UP = known(
    """
    def forward(self, hidden_states):
        up_states = self.gate_up_proj(hidden_states)
        gate, up_states = up_states.chunk(2, dim=-1)
        up_states = up_states * self.activation_fn(gate)
        return self.down_proj(up_states)
    """
)
# the experts of Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek-V3 and others: stacked
# [experts, 2 * intermediate, hidden] and [experts, hidden, intermediate] weights
_EXPERTS_LOOP = """
    def forward(self, hidden_states, top_k_index, top_k_weights):
        final_hidden_states = torch.zeros_like(hidden_states)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
            current_hidden_states = self.act_fn(gate) * up
            current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
            current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
            final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))
        return final_hidden_states
    """
_EXPERTS = known(
    _EXPERTS_LOOP,
    # transformers 5.17: no sentinel class for experts of other ranks (the same computation)
    _EXPERTS_LOOP.replace("num_classes=self.num_experts + 1", "num_classes=self.num_experts"),
)
# Llama 4's experts: every expert over its rows of [experts * tokens, hidden], by bmm
_BMM_EXPERTS = known(
    """
    def forward(self, hidden_states):
        hidden_states = hidden_states.view(self.gate_up_proj.shape[0], -1, self.hidden_size)
        gate_up = torch.bmm(hidden_states, self.gate_up_proj)
        gate, up = gate_up.chunk(2, dim=-1)
        next_states = torch.bmm(up * self.act_fn(gate), self.down_proj)
        next_states = next_states.view(-1, self.hidden_size)
        return next_states
    """
)
# what transformers' other experts implementations (grouped_mm, batched_mm) call
_DEFAULT_APPLY_GATE = known(
    """
    def _default_apply_gate(self, gate_up_out):
        gate, up = gate_up_out.chunk(2, dim=-1)
        return self.act_fn(gate) * up
    """
)
# gpt-oss's experts: biases, [experts, hidden, 2 * intermediate] weights with
# gate and up interleaved, each implementation's gate through _apply_gate
_CLAMPED_EXPERTS = known(
    """
    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        next_states = torch.zeros_like(hidden_states, dtype=hidden_states.dtype, device=hidden_states.device)
        with torch.no_grad():
            expert_mask = torch.nn.functional.one_hot(router_indices, num_classes=self.num_experts)
            expert_mask = expert_mask.permute(2, 1, 0)
            expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            expert_idx = expert_idx[0]
            if expert_idx == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[token_idx]
            gate_up = current_state @ self.gate_up_proj[expert_idx] + self.gate_up_proj_bias[expert_idx]
            gated_output = self._apply_gate(gate_up)
            out = gated_output @ self.down_proj[expert_idx] + self.down_proj_bias[expert_idx]
            weighted_output = out * routing_weights[token_idx, top_k_pos, None]
            next_states.index_add_(0, token_idx, weighted_output.to(hidden_states.dtype))
        return next_states
    """
)
_CLAMPED_APPLY_GATE = known(
    """
    def _apply_gate(self, gate_up):
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        gated_output = (up + 1) * glu
        return gated_output
    """
)
# transformers' dispatch among the experts implementations
_EXPERTS_DISPATCH = known(
    """
    def forward(self, *args, **kwargs):
        experts_forward = experts_interface.get_interface(self.config._experts_implementation, original_forward)
        return experts_forward(self, *args, **kwargs)
    """
)


# the gates whose FP8 output feeds a tensorwise Float8Linear down projection
# (patch(fp8=...)), by their GELU approximation (None: SiLU)
_FP8_GATES = {swiglu_over_inputs: None, _tanh_gelu: "tanh", _erf_gelu: "none"}


def _down(module, gated, gate, up):
    """down_proj(gated(gate, up)); gate and up are the forward's own, used by
    nothing else, so a tensorwise Float8Linear takes the gate's FP8 output."""
    down = module.down_proj
    if gated in _FP8_GATES and takes_gate_float8(down) and not compiling():
        return down(gate_float8_input(gate, up, _FP8_GATES[gated], down, over_inputs=True))
    return down(gated(gate, up))


def _gated_forward(gated):
    def forward(self, x):
        return _down(self, gated, self.gate_proj(x), self.up_proj(x))

    return forward


def _gate_up_forward(gated):
    def forward(self, hidden_states):
        gate, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        return _down(self, gated, gate, up)

    return forward


def _bmm_experts_forward(gated):
    def forward(self, hidden_states):
        hidden_states = hidden_states.view(self.gate_up_proj.shape[0], -1, self.hidden_size)
        gate, up = torch.bmm(hidden_states, self.gate_up_proj).chunk(2, dim=-1)
        return torch.bmm(gated(gate, up), self.down_proj).view(-1, self.hidden_size)

    return forward


def _apply_gate(gated):
    def apply_gate(self, gate_up_out):
        gate, up = gate_up_out.chunk(2, dim=-1)
        return gated(gate, up)

    return apply_gate


def _clamped_apply_gate(self, gate_up):
    return fused_clamped_swiglu(gate_up, self.alpha, self.limit, interleaved=True)


def _experts_eager_forward(self, hidden_states, top_k_index, top_k_weights):
    """transformers' eager experts loop, its gate through self._apply_gate."""
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        current = self._apply_gate(nn.functional.linear(hidden_states[token_idx], self.gate_up_proj[expert_idx]))
        current = nn.functional.linear(current, self.down_proj[expert_idx])
        current = current * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current.to(final_hidden_states.dtype))
    return final_hidden_states


def _experts_forward(self, *args, **kwargs):
    """transformers' dispatch: the eager loop above, or another
    implementation, which calls the fused self._apply_gate."""
    implementation = self.config._experts_implementation
    if implementation in (None, "eager"):
        return _experts_eager_forward(self, *args, **kwargs)
    return type(self).forward(self, *args, **kwargs)


def _swiglu_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """_experts_forward, its grouped_mm path through GroupedExpertsFunction:
    the same computation, with less kept for backward."""
    if self.config._experts_implementation == "grouped_mm" and grouped_experts.usable(self, hidden_states, top_k_index):
        return grouped_experts.GroupedExpertsFunction.apply(
            hidden_states, self.gate_up_proj, self.down_proj, top_k_index, top_k_weights
        )
    return _experts_forward(self, hidden_states, top_k_index, top_k_weights)


def _is_experts(module):
    kind = type(module)
    return (
        is_known(kind.forward, _EXPERTS_DISPATCH)
        and is_known(kind.forward.__wrapped__, _EXPERTS)
        and is_known(getattr(kind, "_apply_gate", None), _DEFAULT_APPLY_GATE)
        and getattr(module, "is_concatenated", None) is True
        and getattr(module, "is_transposed", None) is False
        and getattr(module, "has_gate", None) is True
        and getattr(module, "has_bias", None) is False
        and not getattr(module, "has_post_expert_norm", False)
        and hasattr(getattr(module, "config", None), "_experts_implementation")
    )


def _is_clamped_experts(module):
    kind = type(module)
    return (
        is_known(kind.forward, _EXPERTS_DISPATCH)
        and is_known(kind.forward.__wrapped__, _CLAMPED_EXPERTS)
        and is_known(getattr(kind, "_apply_gate", None), _CLAMPED_APPLY_GATE)
        and isinstance(getattr(module, "alpha", None), (int, float))
        and math.isfinite(module.alpha)
        and isinstance(getattr(module, "limit", None), (int, float))
        and module.limit > 0
        and hasattr(getattr(module, "config", None), "_experts_implementation")
    )


def fused_methods(module):
    """{method name: fused function} for a gated MLP or experts module whose
    computation is known, else None."""
    forward = type(module).forward
    if is_known(forward, _GATED) and (gated := gate_of(getattr(module, "act_fn", None))):
        return {"forward": _gated_forward(gated)}
    if is_known(forward, _GATED_ACTIVATION_FN) and (gated := gate_of(getattr(module, "activation_fn", None))):
        return {"forward": _gated_forward(gated)}
    if is_known(forward, _GATE_UP) and (gated := gate_of(getattr(module, "activation_fn", None))):
        return {"forward": _gate_up_forward(gated)}
    if is_known(forward, _BMM_EXPERTS) and (gated := gate_of(getattr(module, "act_fn", None))):
        return {"forward": _bmm_experts_forward(gated)}
    if _is_experts(module) and (gated := gate_of(getattr(module, "act_fn", None))):
        forward = _swiglu_experts_forward if gated is swiglu_over_inputs else _experts_forward
        return {"forward": forward, "_apply_gate": _apply_gate(gated)}
    if _is_clamped_experts(module):  # every implementation, eager's loop too, calls _apply_gate
        return {"_apply_gate": _clamped_apply_gate}
    return None


def _looks_like_a_gate(module):
    """A gated MLP or experts module (not an MoE block, which holds its
    experts and a router that patch leaves alone; not an MLP without a gate,
    which has nothing to fuse)."""
    gated = any(hasattr(module, name) for name in ("gate_proj", "gate_up_proj", "gate_up_proj_bias"))
    return (gated or type(module).__name__.endswith("Experts")) and not hasattr(module, "experts")


def patch_mlps(model, apply=True):
    """Fuses the gates it knows (with apply); returns (how many modules, the
    names of the MLP-like modules it keeps)."""
    replaced, kept = 0, []
    for name, module in model.named_modules():
        if "forward" in module.__dict__ or "_apply_gate" in module.__dict__:  # patched, or the user's own
            continue
        methods = fused_methods(module)
        if methods is not None:
            for method, function in methods.items() if apply else ():
                setattr(module, method, types.MethodType(function, module))
            replaced += 1
        elif _looks_like_a_gate(module):
            kept.append(f"{name} ({type(module).__name__})")
    return replaced, kept
