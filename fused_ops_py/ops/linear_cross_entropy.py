"""Cross-entropy of F.linear(input, weight, bias) without all the logits: a
chunk of rows at a time through fo_cross_entropy and torch's matmul."""

import math
import re
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import dense_like
from .._core import AVAILABLE, compiling, custom_op, eager_apply, empty, or_empty, stats_dtype
from .._ffi import ffi
from .cross_entropy import (
    CROSS_ENTROPY,
    call_cross_entropy,
    check_target,
    cross_entropy_config,
    cross_entropy_struct,
    first_backward,
    loss_shape,
    scale_rows_,
    scaled,
)

# the raw calls -------------------------------------------------------------------------


def check_linear_cross_entropy(
    fn, x, weight, bias, target, ignore_index, label_smoothing, reduction, softcap, chunk_rows
):
    """What only Python can see; returns the config tuple the calls take:
    cross_entropy_config's, then chunk_rows (0: default_chunk_rows's choice)."""
    if chunk_rows is not None and (type(chunk_rows) is not int or chunk_rows <= 0):
        raise ValueError(f"{fn}: chunk_rows={chunk_rows!r} must be None or a positive int")
    _args.check_tensor(fn, "input", x)
    _args.check_companion(fn, "linear_weight", weight, x, "input")
    if bias is not None:
        _args.check_companion(fn, "linear_bias", bias, x, "input")
    for name, value in (("linear_weight", weight), ("linear_bias", bias)):
        if value is not None and value.dtype != x.dtype:
            raise TypeError(f"{fn}: {name} has dtype {value.dtype} but input has dtype {x.dtype}; they must match")
    if x.dim() == 0 or weight.dim() != 2 or weight.shape[1] != x.shape[-1]:
        raise ValueError(
            f"{fn}: linear_weight has shape {tuple(weight.shape)} but must be (vocab, "
            f"{x.shape[-1] if x.dim() else 'hidden'}) for input of shape {tuple(x.shape)}"
        )
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(
            f"{fn}: linear_bias has shape {tuple(bias.shape)} but must be ({weight.shape[0]},), "
            "the rows of linear_weight"
        )
    check_target(fn, target, x, "input")
    return (*cross_entropy_config(fn, ignore_index, label_smoothing, reduction, softcap), chunk_rows or 0)


# linear cross-entropy: the logits of a chunk of rows at a time, never all of
# them. A chunk's logits take at most 1/16 of the bytes all rows' fp32
# logits would, and at most twice the input's bytes, whatever the row
# count: they are the only memory beyond the inputs, the gradients and a
# few values a row. (The second bound keeps a model's peak, which falls in
# the loss, at Liger's where the vocabulary is large: 512 rows, not 1024,
# for 8192 x 4096 into 128256, at 13% more time for the loss.)


def default_chunk_rows(rows, hidden, vocab, element_size):
    limit = min(rows * 4 // (16 * element_size), 2 * rows * hidden // max(vocab, 1))
    if limit >= 256:
        limit -= limit % 128  # whole GEMM tiles
    return max(1, limit)


def _linear_rows(x, target):
    """(x as rows x hidden, the targets dense as rows)."""
    hidden = x.shape[-1]
    return x.reshape(math.prod(x.shape[:-1]), hidden), target.contiguous().view(-1)


def _call_chunk(a, start):
    """One chunk's call; a target the library refuses is named by its row
    in the whole call, not in the chunk."""
    try:
        call_cross_entropy(a)
    except ValueError as error:
        if not start:
            raise
        message = re.sub(r"target\[(\d+)\]", lambda m: f"target[{start + int(m.group(1))}]", str(error), count=1)
        raise ValueError(message) from None


def _linear_chunks(x, weight, bias, targets, template, loss_rows, row_scale, grads, chunk_rows):
    """Runs the rows of x (rows x hidden) chunk_rows (0: default_chunk_rows's) at a time: the chunk's
    logits x_c @ weight.T + bias (torch's GEMM), their losses into loss_rows,
    and, when grads = (grad_input, grad_weight, grad_bias accumulator) has
    any tensor, the logits overwritten by their gradient (times template's
    scale, then row_scale's rows where given), then the gradients from it."""
    want_grad = any(g is not None for g in grads)
    rows = x.shape[0]
    step = chunk_rows or default_chunk_rows(rows, x.shape[1], weight.shape[0], x.element_size())
    # the library reads the logits as x's dtype: autocast must not change
    # the GEMMs' (it would make bf16 logits of fp32 x); and autograd must
    # not record them, even in a backward with create_graph=True
    with torch.no_grad(), torch.autocast(x.device.type, enabled=False):
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            x_c = x[start:stop]
            logits = torch.mm(x_c, weight.t()) if bias is None else torch.addmm(bias, x_c, weight.t())
            a = ffi.new(CROSS_ENTROPY, template[0])
            a.rows = stop - start
            a.loss = loss_rows.data_ptr() + start * loss_rows.element_size()
            a.target = targets.data_ptr() + start * targets.element_size()
            a.logits = logits.data_ptr()
            if want_grad:
                a.dlogits = a.logits  # in place: the logits become their gradient
            _call_chunk(a, start)
            if want_grad:
                if row_scale is not None:
                    scale_rows_(logits, row_scale[start:stop])
                _add_chunk_grads(logits, x_c, weight, start, grads)
            del logits  # before the next chunk's are made: one chunk's at a time


def _add_chunk_grads(dlogits, x_c, weight, start, grads):
    """The gradients from a chunk's dlogits: its rows of grad_input, and
    its terms of grad_weight (the first chunk writes it) and grad_bias."""
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        torch.mm(dlogits, weight, out=grad_input[start : start + dlogits.shape[0]])
    if grad_weight is not None:
        if start == 0:
            torch.mm(dlogits.t(), x_c, out=grad_weight)
        else:
            grad_weight.addmm_(dlogits.t(), x_c)
    if grad_bias is not None:
        grad_bias += dlogits.sum(0, dtype=grad_bias.dtype)


def _linear_grad_buffers(x, rows, weight, bias, want_input, want_weight, want_bias):
    """(grad_input as rows x hidden, grad_weight, the fp32 (fp64) grad_bias
    accumulator), None where not wanted."""
    grad_input = x.new_empty(rows, x.shape[-1]) if want_input else None
    grad_weight = None
    if want_weight:  # the first chunk's GEMM writes it; no chunk when no rows
        grad_weight = dense_like(weight) if rows else torch.zeros_like(weight)
    grad_bias = None
    if want_bias and bias is not None:
        grad_bias = torch.zeros(bias.shape, dtype=stats_dtype(bias.dtype), device=bias.device)
    return grad_input, grad_weight, grad_bias


def _linear_grads(x, weight, bias, grads):
    """The gradients in the inputs' shapes and dtypes."""
    grad_input, grad_weight, grad_bias = grads
    if grad_input is not None:
        grad_input = grad_input.view(x.shape)
    if grad_bias is not None:
        grad_bias = grad_bias.to(bias.dtype)
    return grad_input, grad_weight, grad_bias


def linear_cross_entropy_forward(
    x,
    weight,
    bias,
    target,
    ignore_index,
    label_smoothing,
    softcap,
    reduction,
    chunk_rows,
    want_input,
    want_weight,
    want_bias,
):
    """(loss, grad_input, grad_weight, grad_bias) of cross_entropy(x @
    weight.T + bias, target), the arguments checked
    (check_linear_cross_entropy). For mean and sum the wanted gradients
    (for an incoming gradient of 1) come with the loss, in this one pass;
    for none they are None: the weight of each row arrives only in
    backward (linear_cross_entropy_backward)."""
    x_rows, targets = _linear_rows(x, target)
    rows, vocab = x_rows.shape[0], weight.shape[0]
    loss_dtype = stats_dtype(x.dtype)
    if reduction == "none":
        want_input = want_weight = want_bias = False
    grads = _linear_grad_buffers(x, rows, weight, bias, want_input, want_weight, want_bias)
    # the chunks' gradients are all scaled by the mean's 1 / count: counted
    # first, on the device (inf for none: the loss is then 0 * inf = NaN,
    # and every gradient row, ignored, is 0, as in torch)
    scale = (targets != ignore_index).sum().to(loss_dtype).reciprocal() if reduction == "mean" else None
    template = cross_entropy_struct(x, rows, vocab, vocab, ignore_index, label_smoothing, softcap, scale)
    loss_rows = x.new_empty(target.shape, dtype=loss_dtype)
    _linear_chunks(x_rows, weight, bias, targets, template, loss_rows, None, grads, chunk_rows)
    loss = loss_rows if reduction == "none" else loss_rows.sum()
    return (loss * scale if reduction == "mean" else loss, *_linear_grads(x, weight, bias, grads))


def linear_cross_entropy_backward(
    dloss,
    x,
    weight,
    bias,
    target,
    ignore_index,
    label_smoothing,
    softcap,
    chunk_rows,
    want_input,
    want_weight,
    want_bias,
):
    """(grad_input, grad_weight, grad_bias), None where not wanted, of the
    per-row losses (reduction none) weighted by dloss (target's shape): the
    logits again, a chunk at a time, their gradient scaled row by row."""
    x_rows, targets = _linear_rows(x, target)
    rows, vocab = x_rows.shape[0], weight.shape[0]
    grads = _linear_grad_buffers(x, rows, weight, bias, want_input, want_weight, want_bias)
    template = cross_entropy_struct(x, rows, vocab, vocab, ignore_index, label_smoothing, softcap, None)
    loss_rows = x.new_empty(rows, dtype=stats_dtype(x.dtype))  # not needed, but written
    _linear_chunks(x_rows, weight, bias, targets, template, loss_rows, dloss.contiguous().view(-1), grads, chunk_rows)
    return _linear_grads(x, weight, bias, grads)


# autograd ------------------------------------------------------------------------------


def linear_cross_entropy_save(ctx, x, weight, bias, target, grads, config):
    """config = (ignore_index, label_smoothing, softcap, reduction, chunk_rows). For
    mean and sum, grads (of input, weight, bias; None or empty where not
    wanted) are forward's, to be scaled. For none, the weight of each row
    arrives only in backward, which computes the gradients again from the
    inputs (the caller's own tensors)."""
    if config[3] == "none":
        ctx.save_for_backward(x, weight, bias, target)
    else:
        ctx.save_for_backward(*grads)
    ctx.linear_cross_entropy = config


def linear_cross_entropy_grads(scale, recompute, ctx, dloss):
    """(grad_input, grad_weight, grad_bias): forward's scaled by
    scale(grad, dloss), or for none recompute(dloss, x, weight, bias,
    target, ignore_index, label_smoothing, softcap, chunk_rows, want_input,
    want_weight, want_bias)."""
    saved = ctx.saved_tensors
    ignore_index, label_smoothing, softcap, reduction, chunk_rows = ctx.linear_cross_entropy
    wants = ctx.needs_input_grad[:3]
    if reduction == "none":
        grads = recompute(dloss, *saved, ignore_index, label_smoothing, softcap, chunk_rows, *wants)
    else:
        grads = [scale(grad, dloss) if want else None for grad, want in zip(saved, wants)]
    return tuple(grad if want else None for grad, want in zip(grads, wants))


class LinearCrossEntropyFunction(torch.autograd.Function):
    """apply(input, weight, bias, target, config), config as
    CrossEntropyFunction's."""

    @staticmethod
    def forward(ctx, x, weight, bias, target, config):
        loss, *grads = linear_cross_entropy_forward(x, weight, bias, target, *config, *ctx.needs_input_grad[:3])
        linear_cross_entropy_save(ctx, x, weight, bias, target, grads, config)
        ctx.scaled_in_place = False
        return loss

    @staticmethod
    def backward(ctx, dloss):
        if ctx.linear_cross_entropy[3] != "none":
            first_backward(ctx, "fused_linear_cross_entropy")
        grads = linear_cross_entropy_grads(scale_rows_, linear_cross_entropy_backward, ctx, dloss)
        return (*grads, None, None)


apply_linear_cross_entropy = eager_apply(LinearCrossEntropyFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The op torch.compile sees (torch.library), and its autograd."""

    @custom_op("fused_ops_py::linear_cross_entropy", mutates_args=())
    def linear_cross_entropy_op(
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        target: Tensor,
        ignore_index: int,
        label_smoothing: float,
        softcap: float,
        reduction: str,
        chunk_rows: int,
        want_input: bool,
        want_weight: bool,
        want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        loss, *grads = linear_cross_entropy_forward(
            x,
            weight,
            bias,
            target,
            ignore_index,
            label_smoothing,
            softcap,
            reduction,
            chunk_rows,
            want_input,
            want_weight,
            want_bias,
        )
        return (loss, *(or_empty(g, x) for g in grads))

    @linear_cross_entropy_op.register_fake
    def _(
        x,
        weight,
        bias,
        target,
        ignore_index,
        label_smoothing,
        softcap,
        reduction,
        chunk_rows,
        want_input,
        want_weight,
        want_bias,
    ):
        grads = reduction != "none"
        return (
            x.new_empty(loss_shape(target, reduction), dtype=stats_dtype(x.dtype)),
            x.new_empty(x.shape) if grads and want_input else empty(x),
            weight.new_empty(weight.shape) if grads and want_weight else empty(x),
            bias.new_empty(bias.shape) if grads and want_bias and bias is not None else empty(x),
        )

    @custom_op("fused_ops_py::linear_cross_entropy_backward", mutates_args=())
    def linear_cross_entropy_backward_op(
        dloss: Tensor,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        target: Tensor,
        ignore_index: int,
        label_smoothing: float,
        softcap: float,
        chunk_rows: int,
        want_input: bool,
        want_weight: bool,
        want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor]:
        grads = linear_cross_entropy_backward(
            dloss,
            x,
            weight,
            bias,
            target,
            ignore_index,
            label_smoothing,
            softcap,
            chunk_rows,
            want_input,
            want_weight,
            want_bias,
        )
        return tuple(or_empty(g, x) for g in grads)

    @linear_cross_entropy_backward_op.register_fake
    def _(
        dloss,
        x,
        weight,
        bias,
        target,
        ignore_index,
        label_smoothing,
        softcap,
        chunk_rows,
        want_input,
        want_weight,
        want_bias,
    ):
        return (
            x.new_empty(x.shape) if want_input else empty(x),
            weight.new_empty(weight.shape) if want_weight else empty(x),
            bias.new_empty(bias.shape) if want_bias and bias is not None else empty(x),
        )

    def _linear_cross_entropy_setup(ctx, inputs, output):
        linear_cross_entropy_save(ctx, *inputs[:4], output[1:], tuple(inputs[4:9]))

    def _linear_cross_entropy_grad(ctx, dloss, _dx, _dweight, _dbias):
        grads = linear_cross_entropy_grads(scaled, torch.ops.fused_ops_py.linear_cross_entropy_backward, ctx, dloss)
        return (*grads, None, None, None, None, None, None, None, None, None)

    linear_cross_entropy_op.register_autograd(_linear_cross_entropy_grad, setup_context=_linear_cross_entropy_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_linear_cross_entropy(
    input,
    linear_weight,
    target,
    *,
    linear_bias=None,
    ignore_index=-100,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    chunk_rows=None,
):
    """fused_cross_entropy(F.linear(input, linear_weight, linear_bias),
    target, ...), the logits made a chunk of rows at a time and never all
    at once: by default the extra memory is at most 1/16 of what fp32
    logits of all rows would take, and at most twice input's bytes;
    chunk_rows sets the rows a chunk instead (more rows: more memory, fewer
    accumulations into the weight's gradient). input [..., H], linear_weight [V, H], linear_bias [V]
    (one dtype), target [...] int64. For mean and sum, forward also
    computes the gradients of input, weight and bias (those wanted), and
    backward scales them by the incoming gradient; for none, backward
    computes the logits again with each row's incoming gradient."""
    return linear_cross_entropy_fp32(
        input,
        linear_weight,
        target,
        linear_bias=linear_bias,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
        softcap=softcap,
        chunk_rows=chunk_rows,
    ).to(input.dtype)


def linear_cross_entropy_fp32(
    input,
    linear_weight,
    target,
    *,
    linear_bias=None,
    ignore_index=-100,
    label_smoothing=0.0,
    reduction="mean",
    softcap=None,
    chunk_rows=None,
):
    """fused_linear_cross_entropy with the loss as accumulated, fp32 (fp64
    for fp64), not rounded to input's dtype: the loss Hugging Face's models
    compute from fp32 logits (patch() uses it)."""
    fn = "fused_linear_cross_entropy"
    config = check_linear_cross_entropy(
        fn, input, linear_weight, linear_bias, target, ignore_index, label_smoothing, reduction, softcap, chunk_rows
    )
    grad_enabled = torch.is_grad_enabled()
    wants = (
        grad_enabled and input.requires_grad,
        grad_enabled and linear_weight.requires_grad,
        grad_enabled and linear_bias is not None and linear_bias.requires_grad,
    )
    if compiling():
        return torch.ops.fused_ops_py.linear_cross_entropy(input, linear_weight, linear_bias, target, *config, *wants)[
            0
        ]
    if any(wants):
        return apply_linear_cross_entropy(input, linear_weight, linear_bias, target, config)
    return linear_cross_entropy_forward(input, linear_weight, linear_bias, target, *config, False, False, False)[0]
