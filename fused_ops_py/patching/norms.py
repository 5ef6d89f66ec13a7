"""Norm modules -> FusedLayerNorm / FusedRMSNorm, sharing their Parameters:
torch's LayerNorm and RMSNorm (those very classes, not subclasses, which
may compute something else), and Hugging Face norms whose forward is one of
the computations below. A norm without a weight (Llama 4's qk norm) keeps
its module and computes through fused_rms_norm."""

import types

from torch import nn

from ..modules import FusedLayerNorm, FusedRMSNorm
from ..ops.norm import fused_rms_norm
from ._source import has_hooks, is_known, known

# weight * (x / rms(x)), with eps in `variance_epsilon` (Llama and most others;
# OLMo 2 rounds after the weight, the same in fp32 and within a rounding in bf16)
_WEIGHT_TIMES_NORMED = known(
    """
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
    """,
    """
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)
    """,
    """
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight.to(torch.float32) * hidden_states).to(input_dtype)
    """,
)

# the same through _norm (Llama 4's text model)
_WEIGHT_TIMES_NORMED_THROUGH_NORM = known(
    """
    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight
    """
)

# x / rms(x) in fp32 without a weight: through _norm (Llama 4's), or with eps
# in `eps` (Inkling's)
_UNWEIGHTED_THROUGH_NORM = known(
    """
    def forward(self, x):
        return self._norm(x.float()).type_as(x)
    """
)
_UNWEIGHTED = known(
    """
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.float()
        hidden_states = hidden_states * torch.rsqrt(hidden_states.square().mean(-1, keepdim=True) + self.eps)
        return hidden_states.to(input_dtype)
    """,
)

# x / rms(x) * (1 + weight) in fp32, through _norm (Gemma 1-3, Qwen3-Next)
_ONE_PLUS_WEIGHT = known(
    """
    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
    """
)
# the x / rms(x) in fp32 that these forwards call, by the attribute holding eps
_NORMS = {
    attribute: known(
        f"""
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.{attribute})
    """
    )
    for attribute in ("eps", "variance_epsilon")
}


# a LayerNorm over the last dimension without a bias, in fp32 (Cohere's)
_LAYER_NORM_NO_BIAS = known(
    """
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        mean = hidden_states.mean(-1, keepdim=True)
        variance = (hidden_states - mean).pow(2).mean(-1, keepdim=True)
        hidden_states = (hidden_states - mean) * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight.to(torch.float32) * hidden_states
        return hidden_states.to(input_dtype)
    """
)


def _hf_layer_norm_eps(module):
    """eps of a Hugging Face LayerNorm without bias whose computation is
    known, over a 1-d weight, else None."""
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    if (
        isinstance(weight, nn.Parameter)
        and weight.dim() == 1
        and isinstance(eps, float)
        and getattr(module, "bias", None) is None
        and is_known(type(module).forward, _LAYER_NORM_NO_BIAS)
    ):
        return eps
    return None


def _norm_eps(module):
    """eps of a module whose _norm is known, from the attribute it reads,
    as (attribute, eps); else None."""
    norm = getattr(type(module), "_norm", None)
    for attribute, sources in _NORMS.items():
        eps = getattr(module, attribute, None)
        if isinstance(eps, float) and is_known(norm, sources):
            return attribute, eps
    return None


def _hf_rms_norm(module):
    """(eps, offset) of a Hugging Face RMSNorm whose computation is known,
    else None."""
    weight = getattr(module, "weight", None)
    if not (isinstance(weight, nn.Parameter) and weight.dim() == 1):
        return None
    forward = type(module).forward
    eps = getattr(module, "variance_epsilon", None)
    if isinstance(eps, float) and is_known(forward, _WEIGHT_TIMES_NORMED):
        return eps, 0.0
    norm = _norm_eps(module)
    if norm is None:
        return None
    if is_known(forward, _WEIGHT_TIMES_NORMED_THROUGH_NORM):
        return norm[1], 0.0
    if is_known(forward, _ONE_PLUS_WEIGHT):
        return norm[1], 1.0
    return None


def replacement(module):
    """The fused module computing what `module` does, sharing its
    Parameters; None if there is none."""
    if "forward" in module.__dict__ or has_hooks(module):
        return None
    if type(module) is nn.LayerNorm:
        new = FusedLayerNorm(
            module.normalized_shape,
            eps=module.eps,
            elementwise_affine=module.elementwise_affine,
            bias=module.bias is not None,
            device="meta",
        )
        new.weight, new.bias = module.weight, module.bias
    elif type(module) is getattr(nn, "RMSNorm", None):
        new = FusedRMSNorm(
            module.normalized_shape, eps=module.eps, elementwise_affine=module.elementwise_affine, device="meta"
        )
        new.weight = module.weight
    elif (eps := _hf_layer_norm_eps(module)) is not None:
        new = FusedLayerNorm(tuple(module.weight.shape), eps=eps, bias=False, device="meta")
        new.weight = module.weight
    elif (hf := _hf_rms_norm(module)) is not None:
        eps, offset = hf
        new = FusedRMSNorm(tuple(module.weight.shape), eps=eps, device="meta", offset=offset)
        new.weight = module.weight
    else:
        return None
    new.train(module.training)
    return new


def _unweighted_forward_eps(self, x):
    return fused_rms_norm(x, None, self.eps)


def _unweighted_forward_variance_epsilon(self, x):
    return fused_rms_norm(x, None, self.variance_epsilon)


# a weightless norm's forward, by the attribute holding its eps
_UNWEIGHTED_FORWARDS = {"eps": _unweighted_forward_eps, "variance_epsilon": _unweighted_forward_variance_epsilon}


def _unweighted_eps_attribute(module):
    """The attribute holding eps of a norm without a weight whose
    computation is known, else None."""
    forward = type(module).forward
    if getattr(module, "weight", None) is not None or "forward" in module.__dict__:
        return None
    if is_known(forward, _UNWEIGHTED_THROUGH_NORM):
        norm = _norm_eps(module)
        return None if norm is None else norm[0]
    return "eps" if isinstance(getattr(module, "eps", None), float) and is_known(forward, _UNWEIGHTED) else None


def _looks_like_a_norm(module):
    return type(module).__name__.endswith(("Norm", "NormGated", "Norm1P"))


def patch_norms(model, apply=True):
    """Replaces the norms it knows (with apply); returns (how many, the
    names of the norm-like modules it keeps)."""
    replaced, kept = 0, []
    for parent_name, parent in model.named_modules():
        for name, child in list(parent._modules.items()):
            if (
                child is None
                or isinstance(child, (FusedLayerNorm, FusedRMSNorm))
                or getattr(child.__dict__.get("forward"), "__func__", None) in _UNWEIGHTED_FORWARDS.values()
            ):
                continue
            new = replacement(child)
            if new is not None:
                if apply:
                    setattr(parent, name, new)
                replaced += 1
            elif (attribute := _unweighted_eps_attribute(child)) is not None:
                if apply:
                    child.forward = types.MethodType(_UNWEIGHTED_FORWARDS[attribute], child)
                replaced += 1
            elif _looks_like_a_norm(child):
                kept.append(f"{parent_name}.{name}".lstrip(".") + f" ({type(child).__name__})")
    return replaced, kept
