"""fused_ops_py.patch(model): swap, in place, what a model computes with
torch ops for the fused ops, keeping the very same Parameter objects (so
optimizers, weight tying and checkpoints keep working):

- norms: torch's LayerNorm and RMSNorm, and Hugging Face's RMSNorms (Llama
  style, and Gemma's x * rstd * (1 + weight)) become FusedLayerNorm /
  FusedRMSNorm modules;
- mlp: Hugging Face's gated MLPs (gate_proj / up_proj / down_proj, or
  Phi-3's gate_up_proj) compute act(gate) * up with fused_swiglu (SiLU) or
  fused_geglu (GELU);
- rope: the modeling modules of Hugging Face attention in the model
  compute apply_rotary_pos_emb with fused_rope (a module-wide function: the
  models of that family in the process all take it, with equal values);
- cross_entropy: a causal LM (a model with an lm_head beside its base model)
  computes its training loss with fused_linear_cross_entropy, in fp32 as
  Hugging Face's, never making the logits: in training with labels, its
  output has the loss and no logits.

Modules are recognised by their structure and class names, not by a list of
model families: what is not recognised is left alone."""

import inspect
import sys
import types

import torch
from torch import nn

from .functional import fused_geglu, fused_rope, swiglu_over_inputs
from .losses import linear_cross_entropy_fp32
from .modules import FusedLayerNorm, FusedRMSNorm

# Hugging Face RMSNorms computing x * rstd * (1 + weight), weight from zeros
_OFFSET_NORMS = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm", "Gemma3nRMSNorm")


# norms ------------------------------------------------------------------------------


def _hf_rms_norm(module):
    """(eps, offset) of a Hugging Face RMSNorm: a class named ...RMSNorm with
    a 1-d `weight` and `variance_epsilon` (Llama, Mistral, Qwen, Phi-3:
    weight * (x / rms(x))) or, in Gemma's classes, `eps` (x / rms(x) * (1 +
    weight), in fp32); None for anything else."""
    name = type(module).__name__
    weight = getattr(module, "weight", None)
    if not (name.endswith("RMSNorm") and isinstance(weight, nn.Parameter) and weight.dim() == 1):
        return None
    if name in _OFFSET_NORMS and isinstance(getattr(module, "eps", None), float):
        return module.eps, 1.0
    if isinstance(getattr(module, "variance_epsilon", None), float):
        return module.variance_epsilon, 0.0
    return None


def _norm_replacement(module):
    """The fused module for `module`, sharing its parameters; None if it has
    no fused counterpart."""
    if isinstance(module, (FusedLayerNorm, FusedRMSNorm)):
        return None
    if isinstance(module, nn.LayerNorm):
        new = FusedLayerNorm(module.normalized_shape, eps=module.eps,
                             elementwise_affine=module.elementwise_affine,
                             bias=module.bias is not None, device="meta")
        new.weight, new.bias = module.weight, module.bias
    elif hasattr(nn, "RMSNorm") and isinstance(module, nn.RMSNorm):
        new = FusedRMSNorm(module.normalized_shape, eps=module.eps,
                           elementwise_affine=module.elementwise_affine, device="meta")
        new.weight = module.weight
    elif (hf := _hf_rms_norm(module)) is not None:
        eps, offset = hf
        new = FusedRMSNorm(tuple(module.weight.shape), eps=eps, device="meta", offset=offset)
        new.weight = module.weight
    else:
        return None
    new.train(module.training)
    return new


def _patch_norms(model):
    replaced = 0
    for parent in model.modules():
        for name, child in list(parent._modules.items()):
            new = _norm_replacement(child) if child is not None else None
            if new is not None:
                setattr(parent, name, new)
                replaced += 1
    return replaced


# gated MLPs ---------------------------------------------------------------------------


def _gate(activation):
    """fused_swiglu or fused_geglu (with its approximation) for a Hugging
    Face activation module, or None."""
    name = type(activation).__name__
    if isinstance(activation, nn.SiLU) or name == "SiLUActivation":
        # the projections' outputs are this forward's own: their gradients
        # are written over them
        return swiglu_over_inputs
    if name in ("PytorchGELUTanh", "GELUTanh", "NewGELUActivation", "GELUPytorchTanh") or (
        isinstance(activation, nn.GELU) and activation.approximate == "tanh"
    ):
        return lambda gate, up: fused_geglu(gate, up, approximate="tanh")
    if name == "GELUActivation" or (isinstance(activation, nn.GELU) and activation.approximate == "none"):
        return lambda gate, up: fused_geglu(gate, up, approximate="none")
    return None


def _gated_mlp_forward(gated):
    def forward(self, x):
        return self.down_proj(gated(self.gate_proj(x), self.up_proj(x)))

    return forward


def _gate_up_mlp_forward(gated):
    def forward(self, x):  # Phi-3: one projection, gate then up
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(gated(gate, up))

    return forward


def _mlp_forward(module):
    """The fused forward for a Hugging Face gated MLP, or None."""
    linear = lambda name: isinstance(getattr(module, name, None), nn.Linear)  # noqa: E731
    if not linear("down_proj"):
        return None
    if linear("gate_proj") and linear("up_proj") and (gated := _gate(getattr(module, "act_fn", None))):
        return _gated_mlp_forward(gated)
    if linear("gate_up_proj") and (gated := _gate(getattr(module, "activation_fn", None))):
        return _gate_up_mlp_forward(gated)
    return None


def _patch_mlps(model):
    replaced = 0
    for module in model.modules():
        if "forward" in module.__dict__:  # patched already, or a forward of the user's own
            continue
        forward = _mlp_forward(module)
        if forward is not None:
            module.forward = types.MethodType(forward, module)
            replaced += 1
    return replaced


# rotary position embeddings -----------------------------------------------------------


def _fused_rotary(original):
    """Hugging Face's apply_rotary_pos_emb through fused_rope, with the
    original's parameters (older releases take position_ids before
    unsqueeze_dim, unused)."""
    if "position_ids" in inspect.signature(original).parameters:
        def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
            return fused_rope(q, k, cos, sin, unsqueeze_dim)
    else:
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            return fused_rope(q, k, cos, sin, unsqueeze_dim)
    apply_rotary_pos_emb.fused_ops_py = True
    apply_rotary_pos_emb.__wrapped__ = original  # functools' name for what it replaces
    return apply_rotary_pos_emb


def _patch_rope(model):
    """Replaces apply_rotary_pos_emb in the modeling module of each attention
    module of `model` whose module has Hugging Face's (rotate_half beside
    it); returns how many modeling modules it changed."""
    replaced = 0
    for module in model.modules():
        modeling = sys.modules.get(type(module).__module__)
        original = getattr(modeling, "apply_rotary_pos_emb", None)
        if (type(module).__name__.endswith("Attention") and callable(original)
                and callable(getattr(modeling, "rotate_half", None))
                and not getattr(original, "fused_ops_py", False)):
            modeling.apply_rotary_pos_emb = _fused_rotary(original)
            replaced += 1
    return replaced


# the causal-LM loss ---------------------------------------------------------------------


def _causal_lm_output(model):
    """The output class a Hugging Face causal LM returns (its modeling
    module imports it), or None for a model that is not one."""
    modeling = sys.modules.get(type(model).__module__)
    return getattr(modeling, "CausalLMOutputWithPast", None) or getattr(  # GPT-2's
        modeling, "CausalLMOutputWithCrossAttentions", None)


def _is_causal_lm(model):
    return (
        isinstance(getattr(model, "lm_head", None), nn.Linear)
        and isinstance(getattr(model, getattr(model, "base_model_prefix", ""), None), nn.Module)
        and _causal_lm_output(model) is not None
        and "forward" not in model.__dict__
    )


def _causal_lm_forward(self, *args, labels=None, **kwargs):
    """With labels, in training: the base model's hidden states and the
    loss Hugging Face's ForCausalLMLoss gives (labels shifted by one, -100
    ignored, a mean, or a sum over num_items_in_batch), through
    fused_linear_cross_entropy; no logits. Otherwise the model's own forward."""
    if labels is None or not self.training or not torch.is_grad_enabled():
        return type(self).forward(self, *args, labels=labels, **kwargs)
    num_items_in_batch = kwargs.pop("num_items_in_batch", None)
    shift_labels = kwargs.pop("shift_labels", None)
    for unused in ("logits_to_keep", "num_logits_to_keep", "return_dict"):
        kwargs.pop(unused, None)
    outputs = getattr(self, self.base_model_prefix)(*args, **kwargs)
    hidden = outputs[0]
    if shift_labels is None:
        shift_labels = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    loss = linear_cross_entropy_fp32(
        hidden, self.lm_head.weight, shift_labels.to(hidden.device), linear_bias=self.lm_head.bias,
        reduction="mean" if num_items_in_batch is None else "sum",
        softcap=getattr(self.config, "final_logit_softcapping", None),
    )
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return _causal_lm_output(self)(
        loss=loss, logits=None, hidden_states=getattr(outputs, "hidden_states", None),
        attentions=getattr(outputs, "attentions", None),
    )


def _patch_loss(model):
    replaced = 0
    for module in model.modules():
        if _is_causal_lm(module):
            module.forward = types.MethodType(_causal_lm_forward, module)
            replaced += 1
    return replaced


def patch(model: nn.Module, *, norms=True, mlp=True, rope=True, cross_entropy=True) -> int:
    """Replace, in place, what `model` computes with torch ops by the fused
    ops (see the module's docstring): norms, gated MLPs, rotary embeddings
    and a causal LM's training loss. Returns how many replacements were
    made: a norm module, an MLP's forward, a modeling module's
    apply_rotary_pos_emb or a model's forward each count one. Parameters
    stay the same objects; a module not recognised is left as it is."""
    replaced = 0
    if norms:
        replaced += _patch_norms(model)
    if mlp:
        replaced += _patch_mlps(model)
    if rope:
        replaced += _patch_rope(model)
    if cross_entropy:
        replaced += _patch_loss(model)
    return replaced
