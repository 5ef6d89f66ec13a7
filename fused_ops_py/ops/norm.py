"""LayerNorm and RMSNorm, alone or fused with the residual add and dropout of
a pre-norm transformer block (fo_norm_*): the autograd, the compile op and
the public functions, over the raw calls of ops/norm_calls.py."""

import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .._args import DTYPE_CODES
from .._core import (
    AVAILABLE,
    compiling,
    custom_op,
    eager_apply,
    empty,
    or_empty,
    stats_dtype,
)
from .norm_calls import (
    LAYER,
    RMS,
    check_norm,
    norm_backward,
    norm_backward_prepared,
    norm_forward,
    norm_fp8_forward,
)
from .norm_dropout import norm_seed_offset
from .quantize_fp8 import TRANSPOSES, check_fp8_options, fake_fp8_output, fp8_op_output, fp8_result

# autograd ------------------------------------------------------------------------------


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
    return (want_x, has_residual and want_residual, weight is not None and want_weight, bias is not None and want_bias)


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
    grads = backward(
        dy,
        dresidual_out if has_residual else None,
        h,
        stats,
        weight,
        bias,
        kind,
        dropout_p,
        cols,
        seed_offset,
        x_dtype,
        has_residual,
        *wanted,
    )
    return tuple(g if want else None for g, want in zip(grads, wanted))


def _norm_backward_sharing_dx(*args):
    """The raw backward, with dx the very tensor dresidual is when their
    values agree (eager autograd may hand one tensor to two inputs; a
    registered op may not)."""
    return norm_backward(*args, share_dx=True)


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
        y, residual_out, stats, seed_offset, cols, ctx.prepared = norm_forward(
            fn,
            kind,
            x,
            residual,
            weight,
            bias,
            eps,
            dropout_p,
            normalized_shape,
            True,
            None,
            True,
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
        if (
            prepared is not None
            and dy is not None
            and dy.is_contiguous()
            and (dresidual_out is None or dresidual_out.is_contiguous())
        ):
            h, stats, weight, bias = ctx.saved_tensors[:4]
            if h.data_ptr() == prepared[0].h and h.is_contiguous():
                _, _, _, x_dtype, has_residual, _ = ctx.norm
                wanted = _norm_wants(ctx, weight, bias, has_residual)
                grads = norm_backward_prepared(
                    prepared, dy, dresidual_out, h, stats, weight, bias, x_dtype, has_residual, *wanted, share_dx=True
                )
                return (*grads, None)  # None where not wanted
        return (*norm_grads(_norm_backward_sharing_dx, ctx, dy, dresidual_out), None)


apply_norm = eager_apply(NormFunction)


# torch.compile -------------------------------------------------------------------------


def _register():
    """The ops torch.compile sees (torch.library), and their autograd."""

    @custom_op("fused_ops_py::norm", mutates_args=())
    def norm_op(
        x: Tensor,
        residual: Optional[Tensor],
        weight: Optional[Tensor],
        bias: Optional[Tensor],
        kind: int,
        eps: float,
        dropout_p: float,
        normalized_shape: List[int],
        seed_offset: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor, Tensor]:
        y, residual_out, stats, _, _, _ = norm_forward(
            "fused_ops_py::norm",
            kind,
            x,
            residual,
            weight,
            bias,
            eps,
            dropout_p,
            tuple(normalized_shape),
            True,
            seed_offset,
        )
        return y, or_empty(residual_out, x), stats

    @norm_op.register_fake
    def _(x, residual, weight, bias, kind, eps, dropout_p, normalized_shape, seed_offset):
        cols = math.prod(normalized_shape)
        rows = x.numel() // cols if cols else math.prod(x.shape[: x.dim() - len(normalized_shape)])
        stats = x.new_empty(rows if kind == RMS else 2 * rows, dtype=stats_dtype(x.dtype))
        residual_out = residual.new_empty(residual.shape) if residual is not None else empty(x)
        return x.new_empty(x.shape), residual_out, stats

    @custom_op("fused_ops_py::norm_backward", mutates_args=())
    def norm_backward_op(
        dy: Tensor,
        dresidual_out: Optional[Tensor],
        h: Tensor,
        stats: Tensor,
        weight: Optional[Tensor],
        bias: Optional[Tensor],
        kind: int,
        dropout_p: float,
        cols: int,
        seed_offset: Optional[Tensor],
        x_dtype: torch.dtype,
        has_residual: bool,
        want_x: bool,
        want_residual: bool,
        want_weight: bool,
        want_bias: bool,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        grads = norm_backward(
            dy,
            dresidual_out,
            h,
            stats,
            weight,
            bias,
            kind,
            dropout_p,
            cols,
            seed_offset,
            x_dtype,
            has_residual,
            want_x,
            want_residual,
            want_weight,
            want_bias,
        )
        return tuple(or_empty(g, h) for g in grads)

    @norm_backward_op.register_fake
    def _(
        dy,
        dresidual_out,
        h,
        stats,
        weight,
        bias,
        kind,
        dropout_p,
        cols,
        seed_offset,
        x_dtype,
        has_residual,
        want_x,
        want_residual,
        want_weight,
        want_bias,
    ):
        return (
            h.new_empty(h.shape, dtype=x_dtype) if want_x else empty(h),
            h.new_empty(h.shape) if want_residual else empty(h),
            weight.new_empty(weight.shape) if want_weight else empty(h),
            bias.new_empty(bias.shape) if want_bias else empty(h),
        )

    def _norm_setup(ctx, inputs, output):
        x, residual, weight, bias, kind, _, dropout_p, normalized_shape, seed_offset = inputs
        _, residual_out, stats = output
        norm_save(
            ctx,
            x,
            residual,
            residual_out,
            stats,
            weight,
            bias,
            kind,
            dropout_p,
            math.prod(normalized_shape),
            seed_offset,
        )

    def _norm_grad(ctx, dy, dresidual_out, _dstats):
        grads = norm_grads(torch.ops.fused_ops_py.norm_backward, ctx, dy, dresidual_out)
        return (*grads, None, None, None, None, None)

    norm_op.register_autograd(_norm_grad, setup_context=_norm_setup)

    # the FP8 output (no gradient): transpose as TRANSPOSES' index
    @custom_op("fused_ops_py::norm_fp8", mutates_args=())
    def norm_fp8_op(
        x: Tensor,
        residual: Optional[Tensor],
        weight: Optional[Tensor],
        bias: Optional[Tensor],
        kind: int,
        eps: float,
        dropout_p: float,
        seed_offset: Optional[Tensor],
        recipe: str,
        dtype: torch.dtype,
        transpose: int,
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        fn = "fused_ops_py::norm_fp8"
        args = (fn, kind, x, residual, weight, bias, eps, dropout_p, None, recipe, dtype, TRANSPOSES[transpose])
        (y, scale, y_t), residual_out = norm_fp8_forward(*args, seed_offset=seed_offset)
        return (*fp8_op_output(y, scale, y_t, x, dtype), or_empty(residual_out, x))

    @norm_fp8_op.register_fake
    def _(x, residual, weight, bias, kind, eps, dropout_p, seed_offset, recipe, dtype, transpose):
        residual_out = residual.new_empty(residual.shape) if residual is not None else empty(x)
        return (*fake_fp8_output(x, recipe, dtype, transpose), residual_out)


if AVAILABLE:
    _register()


# the public functions ------------------------------------------------------------------


# torch's RMSNorm default eps, torch.finfo(dtype).eps
_DEFAULT_EPS = {dtype: torch.finfo(dtype).eps for dtype in DTYPE_CODES}


def _norm(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """(y, residual_out or None)."""
    if eps is None:  # a non-tensor x or an unsupported dtype: the checks name it
        eps = _DEFAULT_EPS[x.dtype] if isinstance(x, torch.Tensor) and x.dtype in _DEFAULT_EPS else None
    if compiling():
        shape = check_norm(fn, x, residual, weight, bias, normalized_shape)
        y, residual_out, _ = torch.ops.fused_ops_py.norm(
            x, residual, weight, bias, kind, eps, dropout_p, list(shape), norm_seed_offset(dropout_p)
        )
        return y, residual_out if residual is not None else None
    try:
        wants_grad = torch.is_grad_enabled() and (
            x.requires_grad
            or (weight is not None and weight.requires_grad)
            or (bias is not None and bias.requires_grad)
            or (residual is not None and residual.requires_grad)
        )
    except AttributeError:  # not tensors: the raw call names what is wrong
        wants_grad = False
    if wants_grad:
        out = apply_norm(x, residual, weight, bias, (fn, kind, eps, dropout_p, normalized_shape))
        return out if residual is not None else (out, None)
    return norm_forward(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, False)[:2]


def _norm_fp8(fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, fp8):
    """(the FP8 output as fp8_result gives it, residual_out or None); fp8 =
    (recipe, transpose), e4m3 (an activation's format)."""
    recipe, transpose = fp8
    dtype = torch.float8_e4m3fn
    if eps is None:
        eps = _DEFAULT_EPS[x.dtype] if isinstance(x, torch.Tensor) and x.dtype in _DEFAULT_EPS else None
    if compiling():
        shape = check_norm(fn, x, residual, weight, bias, normalized_shape)
        check_fp8_options(fn, recipe, dtype, transpose)
        if shape != tuple(x.shape[-1:]):
            raise ValueError(f"{fn}: fp8={recipe!r} takes normalized_shape of x's last dimension alone, got {shape}")
        y, scale, y_t, residual_out = torch.ops.fused_ops_py.norm_fp8(
            x,
            residual,
            weight,
            bias,
            kind,
            eps,
            dropout_p,
            norm_seed_offset(dropout_p),
            recipe,
            dtype,
            TRANSPOSES.index(transpose),
        )
    else:
        args = (fn, kind, x, residual, weight, bias, eps, dropout_p, normalized_shape, recipe, dtype, transpose)
        (y, scale, y_t), residual_out = norm_fp8_forward(*args)
    return fp8_result(y, scale, y_t, transpose), residual_out if residual is not None else None


_FP8_DOC = """

    fp8="rowwise" or "tensorwise": the output in FP8 (e4m3) instead, the
    16-bit (or other) output never written: the bytes and scales that
    fused_quantize_fp8(y, recipe=fp8, transpose=transpose) returns for this
    function's y, in its tuple, which takes y's place in the result. No
    gradient flows through it; x is float32, float16 or bfloat16, and
    normalized_shape its last dimension."""


def fused_layer_norm(
    x,
    weight=None,
    bias=None,
    eps=1e-5,
    normalized_shape=None,
    *,
    fp8=None,
    transpose=False,
):
    """torch.nn.functional.layer_norm over the trailing normalized_shape
    (default: weight's shape, else x's last dimension)."""
    fn = "fused_layer_norm"
    if fp8 is not None:
        return _norm_fp8(fn, LAYER, x, None, weight, bias, eps, 0.0, normalized_shape, (fp8, transpose))[0]
    return _norm(fn, LAYER, x, None, weight, bias, eps, 0.0, normalized_shape)[0]


def _offset_weight(fn, weight, offset, x, normalized_shape):
    """offset + weight in fp32 (Gemma's x * rstd * (1 + weight)): the kernels
    take an fp32 weight beside any x, and autograd carries its gradient back
    to weight through the addition. weight itself where offset is 0."""
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"{fn}: offset must be a float, got {type(offset).__name__}")
    if offset == 0:
        return weight
    if weight is None:
        shape = normalized_shape if normalized_shape is not None else x.shape[-1:]
        return torch.full(
            tuple(shape) if not isinstance(shape, int) else (shape,),
            float(offset),
            dtype=torch.float32,
            device=x.device,
        )
    return weight.float() + float(offset)


def fused_rms_norm(
    x,
    weight=None,
    eps=None,
    normalized_shape=None,
    offset=0.0,
    *,
    fp8=None,
    transpose=False,
):
    """torch.nn.functional.rms_norm over the trailing normalized_shape;
    eps=None means torch.finfo(x.dtype).eps, as in torch. offset: x * rstd *
    (offset + weight), the sum in fp32 (Gemma's RMSNorm is offset=1.0)."""
    fn = "fused_rms_norm"
    if type(offset) is not float or offset:  # the default 0.0 costs one test
        weight = _offset_weight(fn, weight, offset, x, normalized_shape)
    if fp8 is not None:
        return _norm_fp8(fn, RMS, x, None, weight, None, eps, 0.0, normalized_shape, (fp8, transpose))[0]
    return _norm(fn, RMS, x, None, weight, None, eps, 0.0, normalized_shape)[0]


def fused_add_layer_norm(
    x,
    residual,
    weight=None,
    bias=None,
    eps=1e-5,
    dropout_p=0.0,
    *,
    fp8=None,
    transpose=False,
):
    """(layer_norm(h), h) with h = dropout(x, dropout_p) + residual: the
    pre-norm transformer block in one pass. residual may be fp32 beside
    fp16/bf16 x (an fp32 residual stream); h keeps residual's dtype."""
    fn = "fused_add_layer_norm"
    if fp8 is not None:
        return _norm_fp8(fn, LAYER, x, residual, weight, bias, eps, dropout_p, None, (fp8, transpose))
    return _norm(fn, LAYER, x, residual, weight, bias, eps, dropout_p, None)


def fused_add_rms_norm(
    x,
    residual,
    weight=None,
    eps=None,
    dropout_p=0.0,
    offset=0.0,
    *,
    fp8=None,
    transpose=False,
):
    """(rms_norm(h), h) with h = dropout(x, dropout_p) + residual; offset as
    in fused_rms_norm."""
    fn = "fused_add_rms_norm"
    if type(offset) is not float or offset:
        weight = _offset_weight(fn, weight, offset, x, None)
    if fp8 is not None:
        return _norm_fp8(fn, RMS, x, residual, weight, None, eps, dropout_p, None, (fp8, transpose))
    return _norm(fn, RMS, x, residual, weight, None, eps, dropout_p, None)


for _public in (fused_layer_norm, fused_rms_norm, fused_add_layer_norm, fused_add_rms_norm):
    _public.__doc__ += _FP8_DOC
