"""Cross-entropy of logits, and of a linear layer's output without ever
holding all its logits: the public functions. Each takes one of three
paths: the registered op while torch.compile traces, the autograd.Function
when a gradient is wanted, else the raw call (the loss alone: no gradient
is computed, nothing is saved)."""

import torch

from . import _calls
from ._autograd import apply_cross_entropy, apply_linear_cross_entropy
from ._ops import compiling


def fused_cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, reduction="mean",
                        softcap=None):
    """torch.nn.functional.cross_entropy(logits, target, ...) with the
    classes in the last dimension of logits ([..., V]; target [...],
    int64). softcap: F.cross_entropy of softcap * tanh(logits / softcap);
    None (or 0) for none. The loss has logits' dtype, accumulated in fp32
    (fp64 for fp64). When a gradient is wanted, forward also computes it
    (a tensor of logits' size, kept until backward), and backward scales it
    by the incoming gradient."""
    fn = "fused_cross_entropy"
    if compiling():
        config = _calls.check_cross_entropy(fn, logits, target, ignore_index, label_smoothing, reduction,
                                            softcap)
        want_grad = torch.is_grad_enabled() and logits.requires_grad
        return torch.ops.fused_ops_py.cross_entropy(logits, target, *config, want_grad)[0].to(logits.dtype)
    try:
        want_grad = torch.is_grad_enabled() and logits.requires_grad
    except AttributeError:  # not a tensor: the raw call names what is wrong
        want_grad = False
    if want_grad:  # (the raw call checks the arguments)
        loss = apply_cross_entropy(logits, target, (fn, ignore_index, label_smoothing, softcap, reduction))
    else:
        loss = _calls.cross_entropy_forward(fn, logits, target, ignore_index, label_smoothing, softcap,
                                            reduction, False)[0]
    return loss.to(logits.dtype)


def fused_linear_cross_entropy(input, linear_weight, target, *, linear_bias=None, ignore_index=-100,
                               label_smoothing=0.0, reduction="mean", softcap=None):
    """fused_cross_entropy(F.linear(input, linear_weight, linear_bias),
    target, ...), the logits made a chunk of rows at a time and never all
    at once: the extra memory is at most 1/16 of what fp32 logits of all
    rows would take. input [..., H], linear_weight [V, H], linear_bias [V]
    (one dtype), target [...] int64. For mean and sum, forward also
    computes the gradients of input, weight and bias (those wanted), and
    backward scales them by the incoming gradient; for none, backward
    computes the logits again with each row's incoming gradient."""
    return linear_cross_entropy_fp32(
        input, linear_weight, target, linear_bias=linear_bias, ignore_index=ignore_index,
        label_smoothing=label_smoothing, reduction=reduction, softcap=softcap,
    ).to(input.dtype)


def linear_cross_entropy_fp32(input, linear_weight, target, *, linear_bias=None, ignore_index=-100,
                              label_smoothing=0.0, reduction="mean", softcap=None):
    """fused_linear_cross_entropy with the loss as accumulated, fp32 (fp64
    for fp64), not rounded to input's dtype: the loss Hugging Face's models
    compute from fp32 logits (patch() uses it)."""
    fn = "fused_linear_cross_entropy"
    config = _calls.check_linear_cross_entropy(fn, input, linear_weight, linear_bias, target, ignore_index,
                                               label_smoothing, reduction, softcap)
    grad_enabled = torch.is_grad_enabled()
    wants = (
        grad_enabled and input.requires_grad,
        grad_enabled and linear_weight.requires_grad,
        grad_enabled and linear_bias is not None and linear_bias.requires_grad,
    )
    if compiling():
        return torch.ops.fused_ops_py.linear_cross_entropy(input, linear_weight, linear_bias, target,
                                                           *config, *wants)[0]
    if any(wants):
        return apply_linear_cross_entropy(input, linear_weight, linear_bias, target, config)
    return _calls.linear_cross_entropy_forward(input, linear_weight, linear_bias, target, *config,
                                               False, False, False)[0]
