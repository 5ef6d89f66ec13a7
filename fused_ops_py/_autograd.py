"""Autograd for every op: what forward saves and how backward turns it into
gradients. Each op has one `*_save(ctx, ...)` and one `*_grads(backward,
ctx, ...)`: the eager autograd.Functions here use them with the raw calls,
and the torch.library registration (_ops.py) uses the very same two with its
registered backward op, so both paths save the same state.

Everything goes through save_for_backward, so saved-tensor hooks
(offloading, checkpointing) see all of it."""

import inspect

import torch

from . import _calls


# torch before 2.12 wraps Function.apply in Python: it looks for functorch
# transforms and setup_context and maps over every argument, which costs more
# than the C apply it then calls. eager_apply(F) calls the C apply itself
# when no transform is active, unwrapping dead functorch wrappers as torch does.
_PYTHON_APPLY = inspect.isfunction(getattr(torch.autograd.Function.apply, "__func__", None))


def eager_apply(function):
    """function.apply, or a cheaper equivalent on torches that wrap it in Python."""
    if not _PYTHON_APPLY:
        return function.apply
    c_apply = super(torch.autograd.Function, function).apply
    transforms_active = torch._C._are_functorch_transforms_active
    unwrap_if_dead = torch._C._functorch.unwrap_if_dead
    tensor = torch.Tensor

    def apply(*args):
        if transforms_active():
            return function.apply(*args)
        return c_apply(*[unwrap_if_dead(a) if isinstance(a, tensor) else a for a in args])

    return apply


# the norm family ------------------------------------------------------------------


def norm_save(ctx, x, residual, residual_out, stats, weight, bias, kind, dropout_p, cols, seed_offset):
    """Saves h (x, or residual_out, which the caller keeps anyway), the
    packed statistics and the parameters. The dropout mask is never stored:
    backward regenerates it from seed_offset (ints in eager mode, a tensor
    under torch.compile, which is saved as a tensor)."""
    h = residual_out if residual is not None else x
    if isinstance(seed_offset, torch.Tensor):
        ctx.save_for_backward(h, stats, weight, bias, seed_offset)
        seed_offset = None
    else:
        ctx.save_for_backward(h, stats, weight, bias)
    ctx.norm = (kind, dropout_p, cols, x.dtype, residual is not None, seed_offset)


def _norm_wants(ctx, weight, bias, has_residual):
    """(want_x, want_residual, want_weight, want_bias): the gradients to compute."""
    want_x, want_residual, want_weight, want_bias = ctx.needs_input_grad[:4]
    return (want_x, has_residual and want_residual, weight is not None and want_weight,
            bias is not None and want_bias)


def norm_grads(backward, ctx, dy, dresidual_out):
    """(dx, dresidual, dweight, dbias) for inputs (x, residual, weight,
    bias, ...), from backward(dy, dresidual_out, h, stats, weight, bias,
    kind, dropout_p, cols, seed_offset, x_dtype, has_residual, want_x,
    want_residual, want_weight, want_bias), which gives an unwanted gradient
    as None or as an empty tensor."""
    saved = ctx.saved_tensors
    h, stats, weight, bias = saved[:4]
    kind, dropout_p, cols, x_dtype, has_residual, seed_offset = ctx.norm
    if len(saved) > 4:
        seed_offset = saved[4]
    wanted = _norm_wants(ctx, weight, bias, has_residual)
    if dy is None:  # only residual_out was used
        dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
    grads = backward(dy, dresidual_out if has_residual else None, h, stats, weight, bias, kind,
                     dropout_p, cols, seed_offset, x_dtype, has_residual, *wanted)
    return tuple(g if want else None for g, want in zip(grads, wanted))


def _norm_backward_sharing_dx(*args):
    """The raw backward, with dx the very tensor dresidual is when their
    values agree (eager autograd may hand one tensor to two inputs; a
    registered op may not)."""
    return _calls.norm_backward(*args, share_dx=True)


class NormFunction(torch.autograd.Function):
    """apply(x, residual, weight, bias, config), config = (fn, kind, eps,
    dropout_p, normalized_shape): the fewest arguments, since apply costs
    0.2 us an argument. Returns y, or (y, residual_out) with a residual.

    Forward prepares backward's struct on the caller's thread, where
    Python runs faster than on autograd's CUDA thread; backward takes it
    when the gradients are dense and h is dense at the address forward saw
    (a saved-tensor hook may hand back another tensor)."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, config):
        fn, kind, eps, dropout_p, normalized_shape = config
        y, residual_out, stats, seed_offset, cols, ctx.prepared = _calls.norm_forward(
            fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, True, None, True,
        )
        norm_save(ctx, x, residual, residual_out, stats, weight, bias, kind, dropout_p, cols, seed_offset)
        if residual is None:
            return y
        # an unused output gets None, not a zero tensor: norm_grads makes
        # the zeros of an unused y itself
        ctx.set_materialize_grads(False)
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual_out=None):
        prepared = ctx.prepared
        if (prepared is not None and dy is not None and dy.is_contiguous()
                and (dresidual_out is None or dresidual_out.is_contiguous())):
            h, stats, weight, bias = ctx.saved_tensors[:4]
            if h.data_ptr() == prepared[0].h and h.is_contiguous():
                _, _, _, x_dtype, has_residual, _ = ctx.norm
                wanted = _norm_wants(ctx, weight, bias, has_residual)
                grads = _calls.norm_backward_prepared(prepared, dy, dresidual_out, h, stats, weight, bias,
                                                      x_dtype, has_residual, *wanted, share_dx=True)
                return (*grads, None)  # None where not wanted
        return (*norm_grads(_norm_backward_sharing_dx, ctx, dy, dresidual_out), None)


# relu(x * scale + bias) and relu ------------------------------------------------------


def bias_scale_relu_save(ctx, bias, scale, mask):
    ctx.save_for_backward(mask)
    ctx.bias_scale_relu = (scale, None if bias is None else bias.dtype)


def _bias_scale_relu_wants(ctx):
    """(want_dx, the bias's dtype where its gradient is wanted, else None)."""
    _, bias_dtype = ctx.bias_scale_relu
    wants = ctx.needs_input_grad
    return wants[0], bias_dtype if bias_dtype is not None and wants[1] else None


def bias_scale_relu_grads(backward, ctx, dy):
    """(dx, dbias) from backward(dy, mask, scale, want_dx, bias_dtype or None)."""
    (mask,) = ctx.saved_tensors
    want_dx, bias_dtype = _bias_scale_relu_wants(ctx)
    dx, dbias = backward(dy, mask, ctx.bias_scale_relu[0], want_dx, bias_dtype)
    return dx if want_dx else None, dbias if bias_dtype is not None else None


class BiasScaleReLUFunction(torch.autograd.Function):
    """apply(x, bias, (fn, scale)). Forward prepares backward's struct, as
    NormFunction's does; backward takes it for a dense dy and the mask
    forward saw."""

    @staticmethod
    def forward(ctx, x, bias, config):
        fn, scale = config
        y, mask, ctx.prepared = _calls.bias_scale_relu_forward(fn, x, bias, scale, True, True)
        bias_scale_relu_save(ctx, bias, scale, mask)
        return y

    @staticmethod
    def backward(ctx, dy):
        if dy.is_contiguous():
            (mask,) = ctx.saved_tensors
            if mask.data_ptr() == ctx.prepared[0].mask:
                want_dx, bias_dtype = _bias_scale_relu_wants(ctx)
                dx, dbias = _calls.bias_scale_relu_backward_prepared(ctx.prepared, dy, dy, want_dx,
                                                                     bias_dtype)
                return dx, dbias, None  # None where not wanted
        return (*bias_scale_relu_grads(_calls.bias_scale_relu_backward, ctx, dy), None)


# square ---------------------------------------------------------------------------


def square_save(ctx, x):
    ctx.save_for_backward(x)


def square_grads(backward, ctx, dy):
    (x,) = ctx.saved_tensors
    return backward(dy, x)


class SquareFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        square_save(ctx, x)
        return _calls.square_forward(x)

    @staticmethod
    def backward(ctx, dy):
        return square_grads(_calls.square_backward, ctx, dy)


# reduce_sum -----------------------------------------------------------------------


def reduce_sum_save(ctx, x):
    ctx.input_shape = x.shape


def reduce_sum_grads(ctx, dy):
    # every element gets dy: an expanded view, as torch.sum's backward
    return dy.expand(ctx.input_shape)


class ReduceSumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        reduce_sum_save(ctx, x)
        return _calls.reduce_sum(x)

    @staticmethod
    def backward(ctx, dy):
        return reduce_sum_grads(ctx, dy)


# swiglu ---------------------------------------------------------------------------


def swiglu_save(ctx, gate, up):
    ctx.save_for_backward(gate, up)


def swiglu_grads(backward, ctx, dy):
    """(dgate, dup) from backward(dy, gate, up, want_gate, want_up)."""
    gate, up = ctx.saved_tensors
    want_gate, want_up = ctx.needs_input_grad[:2]
    dgate, dup = backward(dy, gate, up, want_gate, want_up)
    return dgate if want_gate else None, dup if want_up else None


def _swiglu_backward_over_inputs(*args):
    return _calls.swiglu_backward(*args, over_inputs=True)


class SwiGLUFunction(torch.autograd.Function):
    """apply(gate, up, over_inputs): with over_inputs (gate and up are the
    caller's temporaries, used by nothing else), backward writes the
    gradients over the saved gate and up."""

    @staticmethod
    def forward(ctx, gate, up, over_inputs):
        swiglu_save(ctx, gate, up)
        ctx.over_inputs = over_inputs
        return _calls.swiglu_forward("fused_swiglu", gate, up)

    @staticmethod
    def backward(ctx, dy):
        backward = _swiglu_backward_over_inputs if ctx.over_inputs else _calls.swiglu_backward
        return (*swiglu_grads(backward, ctx, dy), None)


# geglu ----------------------------------------------------------------------------


def geglu_save(ctx, gate, up, approximate):
    ctx.save_for_backward(gate, up)
    ctx.approximate = approximate


def geglu_grads(backward, ctx, dy):
    """(dgate, dup) from backward(dy, gate, up, approximate, want_gate, want_up)."""
    gate, up = ctx.saved_tensors
    want_gate, want_up = ctx.needs_input_grad[:2]
    dgate, dup = backward(dy, gate, up, ctx.approximate, want_gate, want_up)
    return dgate if want_gate else None, dup if want_up else None


class GeGLUFunction(torch.autograd.Function):
    """apply(gate, up, approximate). Forward prepares backward's struct, as
    NormFunction's does; backward takes it for a dense dy and the gate and
    up forward saw."""

    @staticmethod
    def forward(ctx, gate, up, approximate):
        geglu_save(ctx, gate, up, approximate)
        y, ctx.prepared = _calls.geglu_forward("fused_geglu", gate, up, approximate, True)
        return y

    @staticmethod
    def backward(ctx, dy):
        prepared = ctx.prepared
        if prepared is not None and dy.is_contiguous():
            gate, up = ctx.saved_tensors
            if (gate.data_ptr() == prepared.gate and up.data_ptr() == prepared.up
                    and gate.is_contiguous() and up.is_contiguous()):
                want_gate, want_up = ctx.needs_input_grad[:2]
                return (*_calls.geglu_backward_prepared(prepared, dy, want_gate, want_up, gate), None)
        return (*geglu_grads(_calls.geglu_backward, ctx, dy), None)


# clamped swiglu -------------------------------------------------------------------


def clamped_swiglu_save(ctx, gate_up, alpha, limit, interleaved):
    ctx.save_for_backward(gate_up)
    ctx.clamped_swiglu = (alpha, limit, interleaved)


def clamped_swiglu_grads(backward, ctx, dy):
    """dgate_up from backward(dy, gate_up, alpha, limit, interleaved)."""
    (gate_up,) = ctx.saved_tensors
    return backward(dy, gate_up, *ctx.clamped_swiglu)


class ClampedSwiGLUFunction(torch.autograd.Function):
    """apply(gate_up, alpha, limit, interleaved)."""

    @staticmethod
    def forward(ctx, gate_up, alpha, limit, interleaved):
        clamped_swiglu_save(ctx, gate_up, alpha, limit, interleaved)
        return _calls.clamped_swiglu_forward("fused_clamped_swiglu", gate_up, alpha, limit, interleaved)

    @staticmethod
    def backward(ctx, dy):
        return clamped_swiglu_grads(_calls.clamped_swiglu_backward, ctx, dy), None, None, None


# rope -----------------------------------------------------------------------------
#
# The rotation is linear in q and k: backward needs only cos and sin, never
# q or k. cos and sin get no gradient (check_rope refuses them requiring one).


def rope_save(ctx, q, k, cos, sin, unsqueeze_dim, interleaved):
    ctx.save_for_backward(cos, sin)
    ctx.rope = (unsqueeze_dim, interleaved, q.shape, k.shape)


def rope_grads(backward, ctx, dq_embed, dk_embed):
    """(dq, dk) from backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim,
    interleaved, want_q, want_k). An output that got no gradient (None) has zeros, as an
    expanded view: it is read only if its input's gradient is wanted."""
    cos, sin = ctx.saved_tensors
    unsqueeze_dim, interleaved, q_shape, k_shape = ctx.rope
    want_q, want_k = ctx.needs_input_grad[:2]
    like = dq_embed if dq_embed is not None else dk_embed
    if like is None:  # neither output had a gradient
        return None, None
    if dq_embed is None:
        dq_embed = like.new_zeros(()).expand(q_shape)
    if dk_embed is None:
        dk_embed = like.new_zeros(()).expand(k_shape)
    dq, dk = backward(dq_embed, dk_embed, cos, sin, unsqueeze_dim, interleaved, want_q, want_k)
    return dq if want_q else None, dk if want_k else None


class RoPEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, cos, sin, unsqueeze_dim, interleaved):
        rope_save(ctx, q, k, cos, sin, unsqueeze_dim, interleaved)
        # an unused output gets None, not a zero tensor: rope_grads stands
        # an expanded zero in for it
        ctx.set_materialize_grads(False)
        return _calls.rope_forward(q, k, cos, sin, unsqueeze_dim, interleaved)

    @staticmethod
    def backward(ctx, dq_embed, dk_embed):
        return (*rope_grads(_calls.rope_backward, ctx, dq_embed, dk_embed), None, None, None, None)


# cross-entropy and linear cross-entropy ----------------------------------------------
#
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
        loss, dlogits = _calls.cross_entropy_forward(fn, logits, target, *config, True)
        cross_entropy_save(ctx, dlogits)
        ctx.scaled_in_place = False
        return loss

    @staticmethod
    def backward(ctx, dloss):
        first_backward(ctx, "fused_cross_entropy")
        return cross_entropy_grads(_calls.scale_rows_, ctx, dloss), None, None


def linear_cross_entropy_save(ctx, x, weight, bias, target, grads, config):
    """config = (ignore_index, label_smoothing, softcap, reduction). For
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
    target, ignore_index, label_smoothing, softcap, want_input, want_weight,
    want_bias)."""
    saved = ctx.saved_tensors
    ignore_index, label_smoothing, softcap, reduction = ctx.linear_cross_entropy
    wants = ctx.needs_input_grad[:3]
    if reduction == "none":
        grads = recompute(dloss, *saved, ignore_index, label_smoothing, softcap, *wants)
    else:
        grads = [scale(grad, dloss) if want else None for grad, want in zip(saved, wants)]
    return tuple(grad if want else None for grad, want in zip(grads, wants))


class LinearCrossEntropyFunction(torch.autograd.Function):
    """apply(input, weight, bias, target, config), config as
    CrossEntropyFunction's."""

    @staticmethod
    def forward(ctx, x, weight, bias, target, config):
        loss, *grads = _calls.linear_cross_entropy_forward(x, weight, bias, target, *config,
                                                           *ctx.needs_input_grad[:3])
        linear_cross_entropy_save(ctx, x, weight, bias, target, grads, config)
        ctx.scaled_in_place = False
        return loss

    @staticmethod
    def backward(ctx, dloss):
        if ctx.linear_cross_entropy[3] != "none":
            first_backward(ctx, "fused_linear_cross_entropy")
        grads = linear_cross_entropy_grads(_calls.scale_rows_, _calls.linear_cross_entropy_backward,
                                           ctx, dloss)
        return (*grads, None, None)


apply_norm = eager_apply(NormFunction)
apply_bias_scale_relu = eager_apply(BiasScaleReLUFunction)
apply_square = eager_apply(SquareFunction)
apply_reduce_sum = eager_apply(ReduceSumFunction)
apply_swiglu = eager_apply(SwiGLUFunction)
apply_geglu = eager_apply(GeGLUFunction)
apply_clamped_swiglu = eager_apply(ClampedSwiGLUFunction)
apply_rope = eager_apply(RoPEFunction)
apply_cross_entropy = eager_apply(CrossEntropyFunction)
apply_linear_cross_entropy = eager_apply(LinearCrossEntropyFunction)
