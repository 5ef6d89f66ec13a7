"""A causal LM's training loss through fused_linear_cross_entropy (never
making the logits), where its forward is one of causal_lm_sources' and its
loss function is transformers' ForCausalLMLoss: labels shifted by one,
ignore_index left out, a mean, or a sum over num_items_in_batch. A softcap
(Gemma 2/3) and a scale of the logits (Granite, Cohere) go into the fused
loss; a router's auxiliary loss is added as the model adds it."""

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass

import torch
from torch import nn

from ..ops.linear_cross_entropy import default_chunk_rows, linear_cross_entropy_fp32
from . import causal_lm_sources as sources
from ._source import has_hooks, is_known, known


@dataclass(frozen=True)
class _Recipe:
    sources: frozenset
    logits: str = "plain"  # or "softcapped", "divided by logits_scaling", "times logit_scale"
    router_aux_loss: bool = False


_RECIPES = (
    _Recipe(known(sources.DENSE, sources.MOE, sources.GPT2)),
    _Recipe(known(sources.MOE_AUX), router_aux_loss=True),
    _Recipe(known(sources.SOFTCAPPED), logits="softcapped"),
    _Recipe(known(sources.SCALED_DOWN), logits="divided by logits_scaling"),
    _Recipe(known(sources.MOE_AUX_SCALED_DOWN), logits="divided by logits_scaling", router_aux_loss=True),
    _Recipe(known(sources.SCALED), logits="times logit_scale"),
)
_LOSS = known(sources.FOR_CAUSAL_LM_LOSS)
_FIXED_CROSS_ENTROPY = known(sources.FIXED_CROSS_ENTROPY)
# A model whose projections patch made FP8 (it sets this attribute) saves each
# projection's input as FP8, half of bf16's bytes, so at the loss, where a
# step's memory peaks, it holds less: its loss takes chunks of twice the
# default's rows, which halves the accumulations into the LM head's weight
# gradient (bench_train_step.py's fp8 rows measure the peak).
LOSS_CHUNK_SCALE = "_fused_ops_py_loss_chunk_scale"
# the base model's outputs a causal LM's output carries over
_CARRIED = ("cache", "past_key_values", "hidden_states", "attentions", "router_logits", "cross_attentions")


def _known_loss(model):
    try:
        loss = model.loss_function
    except (AttributeError, ValueError):
        return False
    return is_known(loss, _LOSS) and is_known(
        getattr(loss, "__globals__", {}).get("fixed_cross_entropy"), _FIXED_CROSS_ENTROPY
    )


def _logit_scale(model, recipe):
    """The factor on the logits (1.0: none), or None if it is not a number."""
    if recipe.logits == "divided by logits_scaling":
        value = getattr(model.config, "logits_scaling", None)
        return 1.0 / value if isinstance(value, (int, float)) and value else None
    if recipe.logits == "times logit_scale":
        value = getattr(model, "logit_scale", None)
        return float(value) if isinstance(value, (int, float)) else None
    return 1.0


def recipe_of(model):
    """The recipe of a causal LM whose training loss can be fused exactly,
    else None."""
    forward = inspect.unwrap(type(model).forward)
    recipe = next((r for r in _RECIPES if is_known(forward, r.sources)), None)
    head = getattr(model, "lm_head", None)
    if (
        recipe is None
        or type(head) is not nn.Linear
        or "forward" in head.__dict__
        or has_hooks(head)
        or not _known_loss(model)
    ):  # (the fused loss never calls lm_head: its hooks would not run)
        return None
    vocab = head.out_features
    if getattr(model.config, "vocab_size", None) != vocab or getattr(model, "vocab_size", vocab) != vocab:
        return None  # the loss views the logits by the config's vocab
    if _logit_scale(model, recipe) is None:
        return None
    if recipe.logits == "softcapped" and not isinstance(
        getattr(model.config, "final_logit_softcapping", None), (int, float, type(None))
    ):
        return None
    return recipe


def _parts(forward):
    """(the base model's attribute, the output class) of a known forward:
    the first call on self, and the call its last statement returns."""
    function = ast.parse(textwrap.dedent(inspect.getsource(forward))).body[0]
    calls = [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ]
    returned = function.body[-1].value.func.id
    return calls[0].func.attr, forward.__globals__[returned]


def _fused_forward(recipe, forward):
    base, output_class = _parts(forward)
    signature = inspect.signature(forward)

    def fused_forward(self, *args, **kwargs):
        """With labels, in training: the loss of the model's own forward,
        fused, and no logits. Otherwise the model's own forward."""
        arguments = signature.bind(self, *args, **kwargs).arguments
        labels = arguments.get("labels")
        keep = arguments.get("logits_to_keep", 0)
        all_positions = keep is None or (isinstance(keep, int) and keep == 0)
        if labels is None or not self.training or not torch.is_grad_enabled() or not all_positions:
            return type(self).forward(self, *args, **kwargs)
        extra = dict(arguments.pop("kwargs", {}))
        return_dict = extra.pop("return_dict", True)
        passed = {
            name: value
            for name, value in arguments.items()
            if name not in ("self", "labels", "logits_to_keep", "output_router_logits")
        }
        fields = {}
        if recipe.router_aux_loss:
            output_router_logits = arguments.get("output_router_logits")
            if output_router_logits is None:
                output_router_logits = self.config.output_router_logits
            passed["output_router_logits"] = output_router_logits
        outputs = getattr(self, base)(**passed, **extra)
        loss = _loss(self, recipe, outputs[0], labels, extra)
        if recipe.router_aux_loss:
            fields["aux_loss"] = None
            if output_router_logits:
                fields["aux_loss"] = forward.__globals__["load_balancing_loss_func"](
                    outputs.router_logits, self.num_experts, self.num_experts_per_tok, arguments.get("attention_mask")
                )
                loss = loss + self.router_aux_loss_coef * fields["aux_loss"].to(loss.device)
        for name in _CARRIED:
            if name in output_class.__dataclass_fields__:
                fields[name] = getattr(outputs, name, None)
        result = output_class(loss=loss, logits=None, **fields)
        return result if return_dict is not False else result.to_tuple()

    return fused_forward


def _loss(model, recipe, hidden, labels, extra):
    """ForCausalLMLoss of the recipe's logits of `hidden`, fused."""
    ignore_index = extra.get("ignore_index", -100)
    shift_labels = extra.get("shift_labels")
    if shift_labels is None:
        shift_labels = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    num_items_in_batch = extra.get("num_items_in_batch")
    weight, bias = model.lm_head.weight, model.lm_head.bias
    scale = _logit_scale(model, recipe)
    if scale != 1.0:  # the loss of scale * logits: scale the hidden states (and the bias)
        hidden = hidden * scale
        bias = None if bias is None else bias * scale
    softcap = model.config.final_logit_softcapping if recipe.logits == "softcapped" else None
    chunk_rows = None
    chunk_scale = getattr(model, LOSS_CHUNK_SCALE, 1)
    if chunk_scale != 1:
        rows = hidden.numel() // max(hidden.shape[-1], 1)
        chunk_rows = chunk_scale * default_chunk_rows(rows, hidden.shape[-1], weight.shape[0], hidden.element_size())
    loss = linear_cross_entropy_fp32(
        hidden,
        weight,
        shift_labels.to(hidden.device),
        linear_bias=bias,
        ignore_index=ignore_index,
        reduction="mean" if num_items_in_batch is None else "sum",
        softcap=softcap,
        chunk_rows=chunk_rows,
    )
    if num_items_in_batch is not None:
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss


def _looks_like_a_causal_lm(module):
    return isinstance(getattr(module, "lm_head", None), nn.Module) and hasattr(module, "config")


def patch_loss(model, apply=True):
    """Fuses the training loss of the causal LMs in `model` whose
    computation is known (with apply); returns (how many, the names of
    those it keeps)."""
    replaced, kept = 0, []
    for name, module in model.named_modules():
        if "forward" in module.__dict__:  # patched already, or a forward of the user's own
            continue
        recipe = recipe_of(module) if _looks_like_a_causal_lm(module) else None
        if recipe is not None and apply:
            forward = _fused_forward(recipe, inspect.unwrap(type(module).forward))
            module.forward = types.MethodType(forward, module)
        if recipe is not None:
            replaced += 1
        elif _looks_like_a_causal_lm(module):
            kept.append(f"{name or 'the model'}'s loss ({type(module).__name__}.forward)")
    return replaced, kept
