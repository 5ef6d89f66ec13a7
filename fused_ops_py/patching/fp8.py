"""patch(model, fp8=...): the attention and MLP projections -> Float8Linear,
sharing their Parameters, so their GEMMs run in FP8 through torch._scaled_mm.
The LM head keeps its precision (and the fused linear cross-entropy).

Unlike the rest of patch, this changes what the model computes, by FP8's
rounding of each GEMM's operands: the user asks for it."""

import torch
from torch import nn

from ..float8_linear import RECIPES, Float8Linear
from ._source import has_hooks

# q/k/v/o (and Phi-3's fused qkv), gate/up/down (and the fused gate_up)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj")
DEFAULT_RECIPE = "tensorwise"  # the faster recipe under torchao and here (docs/performance.md)
_ALIGNMENT = 16  # torch._scaled_mm's: in and out features


def fp8_recipe(fp8):
    """The recipe fp8 names (True: the default), None for False."""
    if fp8 is False or fp8 is None:
        return None
    if fp8 is True:
        return DEFAULT_RECIPE
    if fp8 in RECIPES:
        return fp8
    raise ValueError(f"fused_ops_py.patch: fp8={fp8!r} must be False, True, 'tensorwise' or 'rowwise'")


def check_fp8_device(model):
    """FP8 GEMMs need a GPU of compute capability 8.9 (Ada) or later: the
    CPU and older GPUs get a ValueError naming the device."""
    parameter = next(model.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    if device.type != "cuda":
        raise ValueError(
            f"fused_ops_py.patch(fp8=...): the model is on {device}; FP8 GEMMs (torch._scaled_mm) need a CUDA GPU "
            "of compute capability 8.9 or later"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < (8, 9):
        raise ValueError(
            f"fused_ops_py.patch(fp8=...): the model is on {device}, a {torch.cuda.get_device_name(device)} of "
            f"compute capability {capability[0]}.{capability[1]}; FP8 GEMMs need 8.9 (Ada, Hopper) or later"
        )


def _replaceable(linear):
    return (
        type(linear) is nn.Linear
        and linear.in_features % _ALIGNMENT == 0
        and linear.out_features % _ALIGNMENT == 0
        and linear.weight.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and not has_hooks(linear)
    )


def patch_fp8(model, recipe, apply=True):
    """The projections -> Float8Linear (with apply); returns (how many, the
    names of the projections it keeps: not nn.Linear itself, features not
    multiples of 16, or hooked)."""
    replaced, kept = 0, []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if name not in PROJECTIONS or isinstance(child, Float8Linear):
                continue
            path = f"{parent_name}.{name}" if parent_name else name
            if not _replaceable(child):
                kept.append(f"{path} ({type(child).__name__})")
                continue
            if apply:
                setattr(parent, name, Float8Linear.from_linear(child, recipe=recipe))
            replaced += 1
    return replaced, kept
