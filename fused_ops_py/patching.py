"""fused_ops_py.patch(model): swap a model's norms for the fused modules in
place, keeping the very same Parameter objects (so optimizers, weight tying
and checkpoints keep working)."""

import torch
from torch import nn

from .modules import FusedLayerNorm, FusedRMSNorm


def _is_hf_rms_norm(module):
    """Hugging Face's Llama/Qwen2/Mistral-style RMSNorm: a class named
    ...RMSNorm with a `weight` and a `variance_epsilon`, computing
    weight * (x / rms(x)) in fp32. Variants with other formulas (Gemma's
    1 + weight) keep other attribute names and are left alone."""
    return (
        type(module).__name__.endswith("RMSNorm")
        and isinstance(getattr(module, "weight", None), nn.Parameter)
        and isinstance(getattr(module, "variance_epsilon", None), float)
        and module.weight.dim() == 1
    )


def _replacement(module):
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
    elif _is_hf_rms_norm(module):
        new = FusedRMSNorm(tuple(module.weight.shape), eps=module.variance_epsilon, device="meta")
        new.weight = module.weight
    else:
        return None
    new.train(module.training)
    return new


def patch(model: nn.Module) -> int:
    """Replace, in place, every torch.nn.LayerNorm, torch.nn.RMSNorm and
    Hugging Face RMSNorm-style module of `model` (the model itself included
    only through its children) with FusedLayerNorm / FusedRMSNorm holding the
    same parameters. Returns how many modules were replaced."""
    replaced = 0
    for parent in model.modules():
        for name, child in list(parent._modules.items()):
            new = _replacement(child) if child is not None else None
            if new is not None:
                setattr(parent, name, new)
                replaced += 1
    return replaced
