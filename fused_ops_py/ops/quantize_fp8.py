"""FP8 quantization with a dynamic scale, rowwise or tensorwise, and the
transposed copy for the GEMMs that reduce over rows (fo_quantize_fp8).

The scales are torchao.float8's: q = fp8_max / amax (amax over the finite
values, at least 1e-12), rounded down to a power of two for rowwise; the
output is clamp(x * q) in FP8, and the scale returned is 1 / q, the
dequantization factor that torch._scaled_mm takes."""

import math
from typing import Tuple

import torch
from torch import Tensor

from .. import _args
from .._args import DTYPE_CODES, as_rows
from .._core import AVAILABLE, address, call_struct, compiling, cuda_index, custom_op, new_struct, prepared, scratch
from .._ffi import SYNC, ffi, finish, lib

# the raw call ----------------------------------------------------------------------------

_QUANTIZE = ffi.typeof("fo_quantize_fp8_args *")
FP8_CODES = {torch.float8_e4m3fn: lib.FO_FP8_E4M3, torch.float8_e5m2: lib.FO_FP8_E5M2}
RECIPES = {"tensorwise": lib.FO_FP8_TENSORWISE, "rowwise": lib.FO_FP8_ROWWISE}
TRANSPOSES = (False, True, "only")  # the row-major copy; both copies; the transposed copy alone


def check_quantize(fn, x, recipe, dtype, transpose):
    _args.check_tensor(fn, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{fn}: x is 0-d; quantization works over rows of a last dimension")
    check_fp8_options(fn, recipe, dtype, transpose)


def check_fp8_options(fn, recipe, dtype, transpose):
    if not isinstance(recipe, str) or recipe not in RECIPES:
        raise ValueError(f"{fn}: recipe={recipe!r}; it must be 'rowwise' or 'tensorwise'")
    if dtype not in FP8_CODES:
        raise TypeError(f"{fn}: dtype={dtype}; it must be torch.float8_e4m3fn or torch.float8_e5m2")
    if not (isinstance(transpose, bool) or transpose == "only"):
        raise TypeError(f"{fn}: transpose={transpose!r}; it must be False, True or 'only'")
    if transpose and recipe != "tensorwise":
        raise ValueError(
            f"{fn}: transpose={transpose!r} needs recipe='tensorwise' (one scale fits both copies), "
            f"got recipe={recipe!r}"
        )


def scale_shape(x, recipe):
    """[rows..., 1] for rowwise (x's leading dimensions), () for tensorwise."""
    return (*x.shape[:-1], 1) if recipe == "rowwise" else ()


# an op's FP8 output (fo_fp8_out) ---------------------------------------------------------


def fp8_output(out, like, recipe, dtype, transpose):
    """Allocates an op's FP8 output for values shaped like `like` (rows: its
    leading dimensions) and points `out`, an fo_fp8_out, at it: (y or None,
    scale, y_t or None, amax or None); amax (tensorwise: the pass's running
    max) must live until the call returns."""
    rows, cols = math.prod(like.shape[:-1]), like.shape[-1]
    y = torch.empty(like.shape, dtype=dtype, device=like.device) if transpose != "only" else None
    scale = torch.empty(scale_shape(like, recipe), dtype=torch.float32, device=like.device)
    y_t = torch.empty((cols, rows), dtype=dtype, device=like.device) if transpose else None
    amax = torch.empty((), dtype=torch.float32, device=like.device) if recipe == "tensorwise" else None
    out.y, out.y_t, out.scale, out.amax = address(y), address(y_t), scale.data_ptr(), address(amax)
    return y, scale, y_t, amax


def fp8_fields(recipe, dtype):
    """The fo_fp8_out fields a plan's template keeps."""
    return {"fp8_dtype": FP8_CODES[dtype], "recipe": RECIPES[recipe]}


def fake_fp8_output(like, recipe, dtype, transpose):
    """What a registered op with an FP8 output returns under torch.compile's
    fake tensors (an output not written: empty); transpose as TRANSPOSES' index."""
    rows = math.prod(like.shape[:-1])
    return (
        like.new_empty(like.shape if transpose != 2 else (0,), dtype=dtype),
        like.new_empty(scale_shape(like, recipe), dtype=torch.float32),
        like.new_empty((like.shape[-1], rows) if transpose else (0,), dtype=dtype),
    )


def fp8_op_output(y, scale, y_t, like, dtype):
    """A registered op's (y, scale, y_t), empty tensors for those not written."""
    empty = like.new_empty(0, dtype=dtype)
    return y if y is not None else empty, scale, y_t if y_t is not None else empty


def fp8_result(y, scale, y_t, transpose):
    """What the public functions return: (y, scale), (y, scale, y_t), or (y_t, scale) for transpose="only"."""
    if transpose == "only":
        return y_t, scale
    return (y, scale, y_t) if transpose else (y, scale)


def _quantize_plan(fn, x, recipe, dtype, transpose):
    check_quantize(fn, x, recipe, dtype, transpose)
    _, rows, cols, stride = as_rows(x)
    device = (lib.FO_DEVICE_CUDA if x.is_cuda else lib.FO_DEVICE_CPU, max(x.get_device(), 0))
    template = new_struct(
        _QUANTIZE,
        device,
        x_row_stride=stride,
        rows=rows,
        cols=cols,
        dtype=DTYPE_CODES[x.dtype],
        fp8_dtype=FP8_CODES[dtype],
        recipe=RECIPES[recipe],
    )
    return template, cuda_index(x), []


_quantize_plans = {}
_quantize_workspaces = {}


def quantize_fp8(fn, x, recipe, dtype, transpose):
    """(y or None, scale, y_t or None)."""
    try:
        key = (x.shape, x.stride(), x.dtype, x.device, recipe, dtype, transpose)
    except AttributeError:  # not a tensor: the checks name what is wrong
        key = None
    template, index, free = prepared(_quantize_plans, key, _quantize_plan, fn, x, recipe, dtype, transpose)
    a = call_struct(_QUANTIZE, template, index, free)
    rows_view = as_rows(x)[0]
    a.x = rows_view.data_ptr()
    y = torch.empty(x.shape, dtype=dtype, device=x.device) if transpose != "only" else None
    scale = torch.empty(scale_shape(x, recipe), dtype=torch.float32, device=x.device)
    y_t = torch.empty((a.cols, a.rows), dtype=dtype, device=x.device) if transpose else None
    a.y = y.data_ptr() if y is not None else 0
    a.scale = scale.data_ptr()
    a.y_t = y_t.data_ptr() if transpose else 0
    workspace = scratch(_quantize_workspaces, key, lib.fo_quantize_fp8_workspace_bytes, a, x)
    a.workspace, a.workspace_bytes = (workspace.data_ptr(), workspace.numel()) if workspace is not None else (0, 0)
    status = lib.fo_quantize_fp8(a)
    if status or SYNC:
        finish(lib.fo_quantize_fp8, status, (a.device_type, a.device_index))
    free.append(a)
    return y, scale, y_t


# torch.compile ---------------------------------------------------------------------------


def _register():
    """The op torch.compile sees (torch.library). FP8 outputs carry no
    gradient, so it has no autograd."""

    # transpose as an int (TRANSPOSES' index): a schema takes no bool-or-str; an
    # output not written is an empty tensor
    @custom_op("fused_ops_py::quantize_fp8", mutates_args=())
    def quantize_fp8_op(x: Tensor, recipe: str, dtype: torch.dtype, transpose: int) -> Tuple[Tensor, Tensor, Tensor]:
        y, scale, y_t = quantize_fp8("fused_ops_py::quantize_fp8", x, recipe, dtype, TRANSPOSES[transpose])
        return fp8_op_output(y, scale, y_t, x, dtype)

    @quantize_fp8_op.register_fake
    def _(x, recipe, dtype, transpose):
        return fake_fp8_output(x, recipe, dtype, transpose)


if AVAILABLE:
    _register()


# the public function ---------------------------------------------------------------------


def fused_quantize_fp8(x, *, recipe="rowwise", dtype=torch.float8_e4m3fn, transpose=False):
    """x as FP8 with a dynamic scale: (x_fp8, scale), and with
    transpose=True (tensorwise only) also x_fp8's transpose, rows x cols ->
    cols x rows over x's leading dimensions, written in the same pass:
    (x_fp8, scale, x_fp8_t); transpose="only" writes the transpose alone:
    (x_fp8_t, scale).

    scale is the float32 dequantization factor, x ~ x_fp8.float() * scale,
    as torch._scaled_mm takes it: one a row (shape x.shape[:-1] + (1,)),
    each row's amax mapped to within a factor of 2 of the format's max (a
    power-of-two scale) for recipe="rowwise"; one for the tensor (0-d), its
    amax mapped to the max, for "tensorwise". amax counts the finite values:
    NaN stays NaN (code 0x7F), inf saturates to the max, and an all-zero row
    gives zeros and a finite scale. No gradient flows through it."""
    fn = "fused_quantize_fp8"
    if compiling():
        check_quantize(fn, x, recipe, dtype, transpose)
        y, scale, y_t = torch.ops.fused_ops_py.quantize_fp8(x, recipe, dtype, TRANSPOSES.index(transpose))
    else:
        y, scale, y_t = quantize_fp8(fn, x, recipe, dtype, transpose)
    return fp8_result(y, scale, y_t, transpose)
