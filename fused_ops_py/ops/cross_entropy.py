"""Cross-entropy over the last dimension, its gradient made in the forward
pass (fo_cross_entropy, fo_scale_rows)."""

from typing import Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows, dense_like, device_args
from .._core import (
    AVAILABLE,
    address,
    call_struct,
    compiling,
    cuda_index,
    custom_op,
    eager_apply,
    empty,
    new_struct,
    or_empty,
    prepared,
    stats_dtype,
)
from .._ffi import SYNC, ffi, finish, lib

# the raw calls -------------------------------------------------------------------------


# cross-entropy: forward writes each row's loss and, when a gradient is
# wanted, the gradient of the logits in the same pass, which backward only
# scales by the incoming gradient (fo_scale_rows: nothing to do for 1)

CROSS_ENTROPY = ffi.typeof("fo_cross_entropy_args *")
_SCALE_ROWS = ffi.typeof("fo_scale_rows_args *")
REDUCTION_CODES = {"mean": lib.FO_REDUCTION_MEAN, "sum": lib.FO_REDUCTION_SUM, "none": lib.FO_REDUCTION_NONE}


def check_target(fn, target, x, x_name):
    """Class indices: int64, on x's device, one for each row of x (its
    leading dimensions)."""
    if not isinstance(target, torch.Tensor):
        raise TypeError(f"{fn}: target must be a torch.Tensor, got {type(target).__name__}")
    if target.dtype != torch.int64:
        raise TypeError(f"{fn}: target has dtype {target.dtype}; class indices must be torch.int64")
    if target.get_device() != x.get_device():
        raise ValueError(f"{fn}: target is on {target.device} but {x_name} is on {x.device}; move them to one device")
    if x.dim() == 0:
        raise ValueError(f"{fn}: {x_name} is 0-d; its last dimension must be the classes")
    if target.shape != x.shape[:-1]:
        raise ValueError(
            f"{fn}: target has shape {tuple(target.shape)} but must be {tuple(x.shape[:-1])}, "
            f"the leading dimensions of {x_name} (which has shape {tuple(x.shape)})"
        )


def cross_entropy_config(fn, ignore_index, label_smoothing, reduction, softcap):
    """(ignore_index, label_smoothing, softcap, reduction) as the calls take
    them: softcap None is 0.0 (none); a user's softcap goes to the library
    as it is, which checks it with label_smoothing."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{fn}: ignore_index must be an int, got {type(ignore_index).__name__}")
    if not isinstance(reduction, str) or reduction not in REDUCTION_CODES:
        raise ValueError(f"{fn}: reduction={reduction!r} must be 'mean', 'sum' or 'none'")
    label_smoothing = _args.check_number(fn, "label_smoothing", label_smoothing)
    softcap = 0.0 if softcap is None else _args.check_number(fn, "softcap", softcap)
    return ignore_index, label_smoothing, softcap, reduction


def check_cross_entropy(fn, logits, target, ignore_index, label_smoothing, reduction, softcap):
    """What only Python can see; returns the config tuple the calls take."""
    _args.check_tensor(fn, "logits", logits)
    check_target(fn, target, logits, "logits")
    return cross_entropy_config(fn, ignore_index, label_smoothing, reduction, softcap)


def call_cross_entropy(a):
    status = lib.fo_cross_entropy(a)
    if status or SYNC:
        finish(lib.fo_cross_entropy, status, (a.device_type, a.device_index))


def cross_entropy_struct(x, rows, vocab, row_stride, ignore_index, label_smoothing, softcap, scale, reduction="none"):
    """The arguments every row of a call shares (scale: None, or the one
    loss-dtype element that multiplies the gradient); the addresses of
    loss, total, logits, dlogits and target are the caller's to write."""
    device = device_args(x)
    return new_struct(
        CROSS_ENTROPY,
        device,
        stream=device[2],
        logits_row_stride=row_stride,
        scale=address(scale),
        rows=rows,
        vocab=vocab,
        ignore_index=ignore_index,
        dtype=DTYPE_CODES[x.dtype],
        reduction=REDUCTION_CODES[reduction],
        label_smoothing=label_smoothing,
        softcap=softcap,
    )


def _cross_entropy_plan(fn, logits, target, ignore_index, label_smoothing, softcap, reduction):
    """(template struct, the reduction, CUDA index, free structs) for a
    signature, the arguments checked (its stream is each call's)."""
    ignore_index, label_smoothing, softcap, reduction = check_cross_entropy(
        fn, logits, target, ignore_index, label_smoothing, reduction, softcap
    )
    _, rows, vocab, row_stride = as_rows(logits)
    template = cross_entropy_struct(
        logits, rows, vocab, row_stride, ignore_index, label_smoothing, softcap, None, reduction
    )
    return template, reduction, cuda_index(logits), []


_cross_entropy_plans = {}


def cross_entropy_forward(fn, logits, target, ignore_index, label_smoothing, softcap, reduction, want_grad):
    """(loss, dlogits or None). loss is 0-d of logits' dtype for mean and
    sum (reduced in fp32, fp64 for fp64, and rounded once, as torch's), and
    each row's fp32 (fp64) loss for none, target's shape. With want_grad,
    dlogits (new, dense, logits' shape and dtype) is the gradient of loss
    for an incoming gradient of 1: of the mean, the sum, or of each row's
    own loss for none. The library reduces the rows itself, counting a
    mean's rows on the device (no synchronization: CUDA graphs capture it).
    softcap None (or 0.0) is none."""
    try:
        # only exact types are remembered: True == 1 and 0 == 0.0 as keys
        if (
            type(ignore_index) is not int
            or type(label_smoothing) is not float
            or (softcap is not None and type(softcap) is not float)
            or type(reduction) is not str
        ):
            raise TypeError
        key = (
            logits.shape,
            logits.stride(),
            logits.dtype,
            logits.device,
            target.shape,
            target.dtype,
            target.device,
            ignore_index,
            label_smoothing,
            softcap,
            reduction,
        )
    except (AttributeError, TypeError):  # not tensors, or arguments of other types: checked each call
        key = None
    template, reduction, cuda_index, free = prepared(
        _cross_entropy_plans,
        key,
        _cross_entropy_plan,
        fn,
        logits,
        target,
        ignore_index,
        label_smoothing,
        softcap,
        reduction,
    )
    a = call_struct(CROSS_ENTROPY, template, cuda_index, free)
    loss_dtype = stats_dtype(logits.dtype)
    if reduction == "none":
        loss_rows, total = logits.new_empty(target.shape, dtype=loss_dtype), None
    else:  # a mean's scale goes after the rows
        loss_rows, total = logits.new_empty(target.numel() + 1, dtype=loss_dtype), logits.new_empty(())
    dlogits = dense_like(logits) if want_grad else None
    logits_rows, targets = as_rows(logits)[0], target.contiguous()  # held through the call
    a.loss, a.total, a.dlogits = loss_rows.data_ptr(), address(total), address(dlogits)
    a.logits, a.target = logits_rows.data_ptr(), targets.data_ptr()
    call_cross_entropy(a)
    free.append(a)
    return loss_rows if total is None else total, dlogits


def _scale_rows_plan(x, scale):
    """(template struct, CUDA index, free structs) for a signature of scale_rows_."""
    per_row = scale.numel() != 1
    rows = scale.numel() if per_row else 1
    template = new_struct(
        _SCALE_ROWS,
        device_args(x)[:2],
        rows=rows,
        cols=x.numel() // rows,
        dtype=DTYPE_CODES[x.dtype],
        scale_dtype=DTYPE_CODES[scale.dtype],
        per_row=int(per_row),
    )
    return template, cuda_index(x), []


_scale_rows_plans = {}


def scale_rows_(x, scale):
    """x *= scale in place, and returns x (dense): scale is one element (the
    incoming gradient of a mean or a sum), or one for each row of x seen as
    scale.numel() rows (of a per-row loss). A scale of 1 costs nothing."""
    if x.numel() == 0:
        return x
    scale = scale.contiguous()
    key = (x.numel(), x.dtype, x.device, scale.numel(), scale.dtype)
    template, cuda_index, free = prepared(_scale_rows_plans, key, _scale_rows_plan, x, scale)
    a = call_struct(_SCALE_ROWS, template, cuda_index, free)
    a.x, a.scale = x.data_ptr(), scale.data_ptr()
    status = lib.fo_scale_rows(a)
    if status or SYNC:
        finish(lib.fo_scale_rows, status, (a.device_type, a.device_index))
    free.append(a)
    return x


#
# autograd ------------------------------------------------------------------------------

# Forward computes the gradients for an incoming gradient of 1 and saves
# them; backward scales them by the incoming one. The eager backward scales
# in place (fo_scale_rows: nothing to do for 1), so a second backward
# through the same graph would scale them twice: it raises instead. The
# registered ops' backward returns new tensors, as torch.compile requires.


def first_backward(ctx, fn):
    """Refuses a second backward through a call whose saved gradients the
    first one scaled in place."""
    if ctx.scaled_in_place:
        raise RuntimeError(
            f"{fn}: backward through this loss ran a second time (retain_graph=True): the first "
            "backward scaled the gradients saved by forward in place, so they cannot be used again. "
            "Compute the loss again for another backward"
        )
    ctx.scaled_in_place = True


def cross_entropy_save(ctx, dlogits):
    ctx.save_for_backward(dlogits)


def cross_entropy_grads(scale, ctx, dloss):
    """The gradient of the logits: forward's times dloss (0-d for mean and
    sum, target's shape for none), by scale(grad, dloss)."""
    (dlogits,) = ctx.saved_tensors
    return scale(dlogits, dloss)


class CrossEntropyFunction(torch.autograd.Function):
    """apply(logits, target, config), config = (fn, ignore_index,
    label_smoothing, softcap, reduction) as the user gave them (the raw call
    checks them)."""

    @staticmethod
    def forward(ctx, logits, target, config):
        fn, *config = config
        loss, dlogits = cross_entropy_forward(fn, logits, target, *config, True)
        cross_entropy_save(ctx, dlogits)
        ctx.scaled_in_place = False
        return loss

    @staticmethod
    def backward(ctx, dloss):
        first_backward(ctx, "fused_cross_entropy")
        return cross_entropy_grads(scale_rows_, ctx, dloss), None, None


apply_cross_entropy = eager_apply(CrossEntropyFunction)


def loss_shape(target, reduction):
    """The shape of a loss: target's for "none", else a scalar."""
    return target.shape if reduction == "none" else ()


def scaled(grad, dloss):
    """grad times dloss into a new tensor: a scalar, or one value for each
    row of grad (the registered ops' backward, which may not mutate)."""
    return (grad * (dloss.unsqueeze(-1) if dloss.dim() else dloss)).to(grad.dtype)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""
    #
    # Forward returns the gradients (for an incoming gradient of 1) beside the
    # loss; backward multiplies them by the incoming gradient into new tensors
    # (saved tensors may not be mutated here), which Inductor can fuse.

    @custom_op("fused_ops_py::cross_entropy", mutates_args=())
    def cross_entropy_op(
        logits: Tensor,
        target: Tensor,
        ignore_index: int,
        label_smoothing: float,
        softcap: float,
        reduction: str,
        want_grad: bool,
    ) -> Tuple[Tensor, Tensor]:
        loss, dlogits = cross_entropy_forward(
            "fused_ops_py::cross_entropy", logits, target, ignore_index, label_smoothing, softcap, reduction, want_grad
        )
        return loss, or_empty(dlogits, logits)

    @cross_entropy_op.register_fake
    def _(logits, target, ignore_index, label_smoothing, softcap, reduction, want_grad):
        dlogits = logits.new_empty(logits.shape) if want_grad else empty(logits)
        loss_dtype = stats_dtype(logits.dtype) if reduction == "none" else logits.dtype
        return logits.new_empty(loss_shape(target, reduction), dtype=loss_dtype), dlogits

    def _cross_entropy_setup(ctx, inputs, output):
        cross_entropy_save(ctx, output[1])

    def _cross_entropy_grad(ctx, dloss, _ddlogits):
        return (cross_entropy_grads(scaled, ctx, dloss), None, None, None, None, None, None)

    cross_entropy_op.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_setup)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


def fused_cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, reduction="mean", softcap=None):
    """torch.nn.functional.cross_entropy(logits, target, ...) with the
    classes in the last dimension of logits ([..., V]; target [...],
    int64). softcap: F.cross_entropy of softcap * tanh(logits / softcap);
    None (or 0) for none. The loss has logits' dtype, accumulated in fp32
    (fp64 for fp64). When a gradient is wanted, forward also computes it
    (a tensor of logits' size, kept until backward), and backward scales it
    by the incoming gradient."""
    fn = "fused_cross_entropy"
    if compiling():
        config = check_cross_entropy(fn, logits, target, ignore_index, label_smoothing, reduction, softcap)
        want_grad = torch.is_grad_enabled() and logits.requires_grad
        return torch.ops.fused_ops_py.cross_entropy(logits, target, *config, want_grad)[0].to(logits.dtype)
    try:
        want_grad = torch.is_grad_enabled() and logits.requires_grad
    except AttributeError:  # not a tensor: the raw call names what is wrong
        want_grad = False
    if want_grad:  # (the raw call checks the arguments)
        loss = apply_cross_entropy(logits, target, (fn, ignore_index, label_smoothing, softcap, reduction))
    else:
        loss = cross_entropy_forward(fn, logits, target, ignore_index, label_smoothing, softcap, reduction, False)[0]
    return loss.to(logits.dtype)
