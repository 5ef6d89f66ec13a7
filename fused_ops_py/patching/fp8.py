"""patch(model, fp8=...): the attention and MLP projections -> Float8Linear,
sharing their Parameters, so their GEMMs run in FP8 through torch._scaled_mm.
The LM head keeps its precision (and the fused linear cross-entropy). q/k/v
and gate/up, which read one input, share one cast of it (SharedInputCast).

Unlike the rest of patch, this changes what the model computes, by FP8's
rounding of each GEMM's operands: the user asks for it."""

import torch
from torch import nn

from ..float8_linear import _ALIGNMENT, GEMM_DTYPES, RECIPES, Float8Linear, SharedInputCast
from ._source import has_hooks
from .loss import LOSS_CHUNK_SCALE

# q/k/v/o (and Phi-3's fused qkv), gate/up/down (and the fused gate_up)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj")
SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # each group reads one input
DEFAULT_RECIPE = "tensorwise"  # torchao's faster recipe on the Llama step; bench_train_step's FP8 rows decide ours


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
    """FP8 GEMMs need a GPU of compute capability 8.9 (Ada) or later: a
    projection on the CPU or an older GPU gets a ValueError naming its
    device (the projections' weights, not the first parameter: embeddings
    may sit elsewhere)."""
    devices = {m.weight.device for _, m in _projections(model)} or {torch.device("cpu")}
    for device in sorted(devices, key=str):
        if device.type != "cuda":
            raise ValueError(
                f"fused_ops_py.patch(fp8=...): the model is on {device}; FP8 GEMMs (torch._scaled_mm) need a CUDA "
                "GPU of compute capability 8.9 or later"
            )
        capability = torch.cuda.get_device_capability(device)
        if capability < (8, 9):
            raise ValueError(
                f"fused_ops_py.patch(fp8=...): the model is on {device}, a {torch.cuda.get_device_name(device)} of "
                f"compute capability {capability[0]}.{capability[1]}; FP8 GEMMs need 8.9 (Ada, Hopper) or later"
            )


def _projections(model):
    """(parent, child) for every projection-named child with a weight tensor
    (a module held under two names, once for each)."""
    return [
        (parent, child)
        for _, parent in model.named_modules()
        for name, child in list(parent._modules.items())
        if name in PROJECTIONS and isinstance(getattr(child, "weight", None), torch.Tensor)
    ]


def _why_kept(linear):
    """Why a projection stays as it is, or None if it can be replaced."""
    if type(linear) is not nn.Linear:
        return "not nn.Linear itself"
    for name in ("in_features", "out_features"):
        if getattr(linear, name) % _ALIGNMENT:
            return f"{name}={getattr(linear, name)}, not a multiple of {_ALIGNMENT}"
    if linear.weight.dtype not in GEMM_DTYPES:
        return f"weight dtype {linear.weight.dtype}"
    if has_hooks(linear):
        return "it has hooks"
    return None


def patch_fp8(model, recipe, apply=True):
    """The projections -> Float8Linear (with apply); returns (how many, the
    projections it keeps, each with why). A model patched with another
    recipe is refused: mixing recipes would be silent."""
    replaced, kept = 0, []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent._modules.items()):
            if name not in PROJECTIONS or child is None:
                continue
            path = f"{parent_name}.{name}" if parent_name else name
            if isinstance(child, Float8Linear):
                if child.recipe != recipe:
                    raise ValueError(
                        f"fused_ops_py.patch(fp8={recipe!r}): {path} is already a Float8Linear with "
                        f"recipe={child.recipe!r}"
                    )
                continue
            why = _why_kept(child)
            if why is not None:
                kept.append(f"{path} ({type(child).__name__}: {why})")
                continue
            if apply:
                setattr(parent, name, Float8Linear.from_linear(child, recipe=recipe))
            replaced += 1
        if apply:
            _share_input_casts(parent)
    if apply and replaced:
        for module in model.modules():
            if isinstance(getattr(module, "lm_head", None), nn.Module):
                setattr(module, LOSS_CHUNK_SCALE, 2)
    return replaced, kept


def _share_input_casts(parent):
    """One SharedInputCast for each group of parent's sibling Float8Linear
    (two or more, the same width in); a reader given another tensor casts it."""
    for names in SIBLINGS:
        group = [parent._modules.get(name) for name in names]
        group = [m for m in group if isinstance(m, Float8Linear)]
        if len(group) > 1 and len({m.in_features for m in group}) == 1:
            cast = SharedInputCast(len(group))
            for module in group:
                module.input_cast = cast
