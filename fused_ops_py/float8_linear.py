"""Float8Linear: nn.Linear whose three GEMMs run in FP8 through torch._scaled_mm.

The weight and bias stay what they were (bf16 or fp32 Parameters, the very same
objects after `from_linear`); each step casts the GEMM operands to FP8 with a
dynamic scale and hands the scales to `torch._scaled_mm`, which applies them in
its epilogue. Two recipes, as torchao.float8 names them:

- "tensorwise": one scale per tensor. Gradients are e5m2 (see `_GRAD_DTYPES`).
  Each cast of x and dY writes the row-major and the transposed copy in one
  pass (`fused_quantize_fp8(..., transpose=True)`): the weight gradient reads
  the transposed ones, so no FP8 transpose runs apart.
- "rowwise": one power-of-two scale per row of each operand along the GEMM's
  reduced axis, e4m3 throughout. Each GEMM reduces over another axis, so W is
  quantized again per column for grad_input and x and dY per column (along the
  tokens) for grad_weight.

The three GEMMs, with x [M, K] (leading dimensions flattened), W [N, K] and
dY [M, N]; `_scaled_mm` takes a row-major A and a column-major B:

    out         [M, N] = x_fp8 @ W_fp8^T      A = x by rows,  B = (W by rows)^T
    grad_input  [M, K] = dY_fp8 @ W_fp8       A = dY by rows, B = (W^T by rows)^T
    grad_weight [N, K] = dY^T_fp8 @ x_fp8     A = dY^T by rows, B = (x^T by rows)^T

Saved for backward, only for the gradients wanted: x's transposed FP8 copy
(tensorwise; half of bf16's memory) or x (rowwise), and the weight Parameter
itself. The backward casts W again rather than keeping an FP8 copy of every
weight between forward and backward: the same bytes (the cast is
deterministic), for one more read of W instead of the memory of all of them.

Where `_scaled_mm` has no kernel (the CPU, a GPU below sm_89) `_emulated_scaled_mm`
dequantizes and multiplies in float32; it is plain torch, so torch.compile traces
the whole Function.

An input already in FP8: `Float8Input(data, scale, hp, data_t)`, y's e4m3 bytes
and scales for the layer's recipe (as `fused_quantize_fp8(y, recipe=layer.recipe)`
returns them, with `transpose=True` for data_t) beside y itself: a caller that
casts y once hands it to several projections (`SharedInputCast` does that for
q/k/v and gate/up), and the linear then casts nothing for the forward. `hp` (y)
is where grad_input flows, so it is needed whenever y needs a gradient; the
backward reads it only for the rowwise weight gradient, which quantizes x along
the tokens. Without data_t a tensorwise weight gradient transposes data. With
`hp=None` the input is a constant (no grad_input; inference, or a first layer),
the output takes the weight's dtype, and a rowwise weight gradient dequantizes
the bytes (exact: the scales are powers of two) and quantizes them along the
tokens: a second rounding.
"""

import weakref
from typing import NamedTuple, Optional

import torch
from torch import nn

from ._core import compiling
from .ops.quantize_fp8 import fused_quantize_fp8 as quantize_fp8

RECIPES = ("tensorwise", "rowwise")
GEMM_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
# Gradients have a wider dynamic range than activations and weights. Under one
# scale per tensor, e4m3's range (2^-9 .. 448, 18 binades) flushes the small
# entries of dY to zero, and e5m2 (2^-16 .. 57344, 32 binades) keeps them: torchao's
# tensorwise recipe, and TransformerEngine's "hybrid" format. Per-row scales
# already follow the range, and e4m3's extra mantissa bit then halves the
# rounding error: torchao's rowwise recipe keeps e4m3 for gradients.
_GRAD_DTYPES = {"tensorwise": E5M2, "rowwise": E4M3}
# _scaled_mm's limits: K and N multiples of 16 (the padding below handles the
# token count M, which is the grad_weight GEMM's K).
_ALIGNMENT = 16


class Float8Input(NamedTuple):
    """x handed to Float8Linear already cast to FP8 (see the module docstring).
    data: e4m3 [..., in_features]; scale: the dequantization factor, 0-d or [1]
    (tensorwise) or [..., 1] (rowwise), float32; hp: the high-precision x, or None;
    data_t: tensorwise only, data's transpose [in_features, rows], or None."""

    data: torch.Tensor
    scale: torch.Tensor
    hp: Optional[torch.Tensor] = None
    data_t: Optional[torch.Tensor] = None


def _has_fp8_gemm(device):
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9)


def _emulated_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
    """torch._scaled_mm where it has no kernel: the dequantized operands
    multiplied in float32, the bias added before the one rounding to out_dtype."""
    out = torch.mm(a.float() * scale_a, b.float() * scale_b)
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype)


def _pad_inner(a, b):
    """a [M, K] and b [K, N] with K zero-padded to a multiple of 16; zero bytes
    are +0.0 in both FP8 formats, and F.pad has no FP8 kernel."""
    padding = -a.shape[1] % _ALIGNMENT
    if not padding:
        return a, b
    pad = torch.nn.functional.pad
    a = pad(a.view(torch.uint8), (0, padding)).view(a.dtype)
    b = pad(b.t().view(torch.uint8), (0, padding)).view(b.dtype).t()
    return a, b


def _scaled_gemm(a, b, scale_a, scale_b, out_dtype, bias=None, fast_accum=False):
    """(a * scale_a) @ (b * scale_b) + bias in out_dtype: a [M, K] row-major and
    b [K, N] column-major FP8, scales 0-d (tensorwise) or [M, 1] and [1, N]."""
    if a.stride(1) != 1:  # a Float8Input's bytes may come as any view
        a = a.contiguous()
    if b.stride(0) != 1:
        b = b.t().contiguous().t()
    if not _has_fp8_gemm(a.device):
        return _emulated_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
    a, b = _pad_inner(a, b)
    if scale_a.dim() == 2 and not (fast_accum and out_dtype == torch.bfloat16):
        # The rowwise kernel writes only bf16, and without fast accumulation it is
        # slower than the tensorwise one (torchao's finding): the tensorwise
        # kernel with unit scales, fp32 out, then both scales and the bias in fp32.
        one = scale_a.new_ones(())
        out = torch._scaled_mm(a, b, one, one, out_dtype=torch.float32) * (scale_a * scale_b)
        return (out if bias is None else out + bias.float()).to(out_dtype)
    if out_dtype == torch.float32:  # _scaled_mm takes no bias for an fp32 output
        out = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, use_fast_accum=fast_accum)
        return out if bias is None else out + bias.float()
    bias = None if bias is None else bias.to(out_dtype)
    return torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=fast_accum)


def _version(x):
    """x's version counter; None for an inference tensor, which keeps none."""
    try:
        return x._version
    except RuntimeError:
        return None


class SharedInputCast:
    """One FP8 cast of an input that several Float8Linear read (q/k/v,
    gate/up: `readers` of them). The first to see a tensor casts it; the
    others take the same bytes while it is the same tensor, unchanged (its
    version counter), and the last of them drops them. Each reader gets what
    its own cast would give: the cast is deterministic."""

    def __init__(self, readers):
        self.readers = readers
        self._drop()

    def _drop(self):
        self._source = self._version = self._recipe = self._cast = None
        self._left = 0

    def __call__(self, x, recipe, transposed):
        """A Float8Input of x (with data_t if transposed) for recipe."""
        cast = self._cast
        fresh = not (
            self._left
            and self._source() is x
            and self._version == _version(x)
            and self._recipe == recipe
            and (cast.data_t is not None or not transposed)
        )
        if fresh:
            data, scale, *data_t = quantize_fp8(x, recipe=recipe, dtype=E4M3, transpose=transposed)
            cast = Float8Input(data, scale, x, data_t[0] if data_t else None)
            self._source, self._version, self._recipe, self._cast = weakref.ref(x), _version(x), recipe, cast
            self._left = self.readers
        self._left -= 1
        if not self._left:
            self._drop()
        return cast


class Float8LinearFunction(torch.autograd.Function):
    """x @ weight^T + bias with FP8 operands. x: the high-precision input or None;
    x_fp8, x_scale: its FP8 bytes and scale, or None to quantize x here."""

    @staticmethod
    def forward(ctx, x, x_fp8, x_scale, x_t, weight, bias, recipe):
        # only what the wanted gradients read: x's for dW, the weight's for dx
        for_dx, for_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[4]
        if x_fp8 is None and recipe == "tensorwise" and for_dw:
            x_fp8, x_scale, x_t = quantize_fp8(x, recipe=recipe, dtype=E4M3, transpose=True)
        elif x_fp8 is None:
            x_fp8, x_scale = quantize_fp8(x, recipe=recipe, dtype=E4M3)
        out_dtype = weight.dtype if x is None else x.dtype
        in_features = weight.shape[1]
        rows_fp8 = x_fp8.reshape(-1, in_features)
        rows_scale = x_scale.reshape(-1, 1) if recipe == "rowwise" else x_scale
        weight_fp8, weight_scale = quantize_fp8(weight, recipe=recipe, dtype=E4M3)
        # W [N, K] by rows, transposed: column-major, and its [N, 1] scales become [1, N]
        weight_scale_t = weight_scale.t() if recipe == "rowwise" else weight_scale
        out = _scaled_gemm(rows_fp8, weight_fp8.t(), rows_scale, weight_scale_t, out_dtype, bias, fast_accum=True)
        ctx.recipe = recipe
        ctx.x_shape = x_fp8.shape
        ctx.weight_dtype = weight.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        keep = lambda tensor, wanted: tensor if wanted else None  # noqa: E731
        if recipe == "tensorwise":  # x^T by rows; without data_t, x by rows (transposed in backward)
            saved = (x_t if x_t is not None else rows_fp8, rows_scale, weight)
        elif x is not None:
            saved = (x, None, weight)
        else:
            saved = (rows_fp8, rows_scale, weight)
        ctx.x_transposed = x_t is not None
        ctx.save_for_backward(*(keep(t, w) for t, w in zip(saved, (for_dw, for_dw, for_dx))))
        return out.reshape(x_fp8.shape[:-1] + (weight.shape[0],))

    @staticmethod
    def backward(ctx, grad_out):
        saved_x, saved_x_scale, saved_weight = ctx.saved_tensors
        recipe = ctx.recipe
        out_features = grad_out.shape[-1]
        dy = grad_out.reshape(-1, out_features)
        need_input, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[4]
        grad_dtype = _GRAD_DTYPES[recipe]
        grad_input = grad_weight = grad_bias = None
        if recipe == "tensorwise" and (need_input or need_weight):
            # one cast of dY, both copies; W^T by rows is W cast again, its transposed copy alone
            dy_fp8, dy_scale, *dy_t_fp8 = quantize_fp8(dy, recipe=recipe, dtype=grad_dtype, transpose=need_weight)
            if need_input:
                weight_t_fp8, weight_scale = quantize_fp8(saved_weight, recipe=recipe, dtype=E4M3, transpose="only")
                grad_input = _scaled_gemm(dy_fp8, weight_t_fp8.t(), dy_scale, weight_scale, grad_out.dtype)
            if need_weight:
                x_t_fp8 = saved_x if ctx.x_transposed else saved_x.t().contiguous()
                grad_weight = _scaled_gemm(dy_t_fp8[0], x_t_fp8.t(), dy_scale, saved_x_scale, ctx.weight_dtype)
        elif recipe == "rowwise":
            if need_input:
                dy_fp8, dy_scale = quantize_fp8(dy, recipe=recipe, dtype=grad_dtype)
                # W^T [K, N] by rows: scales per column of W
                weight_t_fp8, weight_t_scale = quantize_fp8(saved_weight.t(), recipe=recipe, dtype=E4M3)
                grad_input = _scaled_gemm(dy_fp8, weight_t_fp8.t(), dy_scale, weight_t_scale.t(), grad_out.dtype)
            if need_weight:
                if saved_x_scale is None:
                    x_rows = saved_x.reshape(-1, saved_x.shape[-1])
                else:  # exact: rowwise scales are powers of two
                    x_rows = saved_x.float() * saved_x_scale
                # dY^T [N, M] and x^T [K, M] by rows: scales per column, along the tokens
                dy_t_fp8, dy_t_scale = quantize_fp8(dy.t(), recipe=recipe, dtype=grad_dtype)
                x_t_fp8, x_t_scale = quantize_fp8(x_rows.t(), recipe=recipe, dtype=E4M3)
                grad_weight = _scaled_gemm(dy_t_fp8, x_t_fp8.t(), dy_t_scale, x_t_scale.t(), ctx.weight_dtype)
        if grad_input is not None:
            grad_input = grad_input.reshape(ctx.x_shape)
        if ctx.needs_input_grad[5]:
            grad_bias = dy.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
        return grad_input, None, None, None, grad_weight, grad_bias, None


def _check_recipe(fn, recipe):
    if recipe not in RECIPES:
        raise ValueError(f"{fn}: recipe={recipe!r} must be one of {', '.join(map(repr, RECIPES))}")


def _check_features(fn, name, value):
    if value <= 0 or value % _ALIGNMENT:
        raise ValueError(
            f"{fn}: {name}={value} must be a positive multiple of {_ALIGNMENT} (torch._scaled_mm's operand alignment)"
        )


def _check_dtype(fn, name, dtype):
    if dtype not in GEMM_DTYPES:
        raise TypeError(f"{fn}: {name} has dtype {dtype}; Float8Linear takes float16, bfloat16 or float32")


class Float8Linear(nn.Linear):
    """nn.Linear with FP8 GEMMs (torch._scaled_mm): the same constructor (plus
    `recipe`, "tensorwise" or "rowwise"), parameters, state_dict keys and
    initialization; in_features and out_features must be multiples of 16.
    forward takes a tensor [..., in_features] or a `Float8Input`."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, recipe="tensorwise"):
        _check_recipe("Float8Linear", recipe)
        _check_features("Float8Linear", "in_features", in_features)
        _check_features("Float8Linear", "out_features", out_features)
        _check_dtype("Float8Linear", "dtype", torch.get_default_dtype() if dtype is None else dtype)
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.recipe = recipe
        self.input_cast = None  # a SharedInputCast, when sibling projections read the same input

    @classmethod
    def from_linear(cls, linear, recipe="tensorwise"):
        """A Float8Linear holding linear's own weight and bias Parameters."""
        _check_dtype("Float8Linear.from_linear", "linear.weight", linear.weight.dtype)
        module = cls(
            linear.in_features, linear.out_features, bias=False, device="meta", dtype=linear.weight.dtype, recipe=recipe
        )
        module.weight = linear.weight
        module.bias = linear.bias
        return module

    def forward(self, x):
        fn = "Float8Linear.forward"
        if isinstance(x, Float8Input):
            data, scale, hp, data_t = x
            self._check_float8_input(fn, x)
        else:
            data = scale = data_t = None
            hp = x
        checked = hp if hp is not None else data
        if checked.dim() == 0 or checked.shape[-1] != self.in_features:
            raise ValueError(f"{fn}: x has shape {tuple(checked.shape)}; its last dimension must be {self.in_features}")
        if hp is not None:
            _check_dtype(fn, "x", hp.dtype)
        if data is None and self.input_cast is not None and not compiling():
            wants_t = self.recipe == "tensorwise" and torch.is_grad_enabled() and self.weight.requires_grad
            data, scale, _, data_t = self.input_cast(hp, self.recipe, wants_t)
        return Float8LinearFunction.apply(hp, data, scale, data_t, self.weight, self.bias, self.recipe)

    def _check_float8_input(self, fn, x):
        data, scale, hp, data_t = x
        if data.dtype != E4M3:
            raise TypeError(f"{fn}: Float8Input.data has dtype {data.dtype}; it must be {E4M3}")
        expected = data.shape[:-1] + (1,) if self.recipe == "rowwise" else None
        if scale.dtype != torch.float32 or (
            scale.shape != expected if expected is not None else scale.shape not in ((), (1,))
        ):
            raise ValueError(
                f"{fn}: Float8Input.scale has shape {tuple(scale.shape)} and dtype {scale.dtype}; recipe "
                f"{self.recipe!r} takes float32 of shape {tuple(expected) if expected else '() or (1,)'}"
            )
        if hp is not None and hp.shape != data.shape:
            raise ValueError(f"{fn}: Float8Input.hp has shape {tuple(hp.shape)} but data {tuple(data.shape)}")
        if data_t is not None:
            want = (data.shape[-1], data.numel() // max(data.shape[-1], 1))
            if self.recipe != "tensorwise" or data_t.dtype != E4M3 or tuple(data_t.shape) != want:
                raise ValueError(
                    f"{fn}: Float8Input.data_t has shape {tuple(data_t.shape)} and dtype {data_t.dtype}; it must be "
                    f"data's transpose, {E4M3} of shape {want}, and only for recipe 'tensorwise' (this layer's is "
                    f"{self.recipe!r})"
                )

    def extra_repr(self):
        return f"{super().extra_repr()}, recipe={self.recipe!r}"
