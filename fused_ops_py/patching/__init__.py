"""fused_ops_py.patch(model): swap, in place, what a model computes with
torch ops for the fused ops, where the replacement is proven to compute the
same, keeping the very same Parameter objects (so optimizers, weight tying
and checkpoints keep working):

- norms: torch's LayerNorm and RMSNorm, and Hugging Face RMSNorms computing
  weight * x / rms(x) or Gemma's x / rms(x) * (1 + weight);
- mlp: Hugging Face gated MLPs and MoE experts compute act(gate) * up with
  fused_swiglu (SiLU) or fused_geglu (GELU);
- rope: a modeling module's rotate-half apply_rotary_pos_emb, through
  fused_rope (module-wide: every model of that family in the process takes
  it, with equal values);
- cross_entropy: a causal LM's training loss through
  fused_linear_cross_entropy, never making the logits (in training with
  labels its output has the loss and no logits);
- fp8=True, "tensorwise" or "rowwise" (asked for, as it changes the
  result by FP8's rounding): the attention and MLP projections become
  Float8Linear (GEMMs in FP8 through torch._scaled_mm), the LM head not.

A computation is recognised by what it is: a torch class itself, or a
function whose source is one of the sources known here (norms.py, mlp.py,
rope.py, causal_lm_sources.py), with the attributes and config fields that
change its result. What is not recognised keeps its own code."""

from torch import nn

from .fp8 import check_fp8_device, fp8_recipe, patch_fp8
from .loss import patch_loss
from .mlp import patch_mlps
from .norms import patch_norms
from .rope import patch_rope


class PatchError(ValueError):
    """patch(model, strict=True) met parts of the model it does not know."""


def patch(model: nn.Module, *, norms=True, mlp=True, rope=True, cross_entropy=True, strict=False, fp8=False) -> int:
    """Replace, in place, what `model` computes with torch ops by the fused
    ops wherever the replacement computes the same (see the module's
    docstring). Returns how many replacements were made: a norm module, an
    MLP's or experts' forward, a modeling module's apply_rotary_pos_emb or
    a causal LM's forward each count one. strict=True: raise PatchError,
    naming them, if any norm, MLP, rotary embedding or causal-LM loss of
    the chosen kinds is not recognised, before changing anything.
    fp8: also run the attention and MLP projections' GEMMs in FP8 (True:
    the default recipe, "tensorwise"; or "rowwise"); needs a GPU of compute
    capability 8.9 or later, and a ValueError names any other device."""
    recipe = fp8_recipe(fp8)
    if recipe is not None:
        check_fp8_device(model)
    parts = [
        part
        for wanted, part in ((norms, patch_norms), (mlp, patch_mlps), (rope, patch_rope), (cross_entropy, patch_loss))
        if wanted
    ]
    if recipe is not None:
        parts.append(lambda model, apply=True: patch_fp8(model, recipe, apply))
    if strict:
        kept = [name for part in parts for name in part(model, apply=False)[1]]
        if kept:
            raise PatchError(
                f"fused_ops_py.patch(strict=True): {type(model).__name__} has {len(kept)} part(s) whose "
                "computation patch does not know; nothing was replaced: " + "; ".join(kept)
            )
    return sum(part(model)[0] for part in parts)


__all__ = ["PatchError", "patch"]
