"""The FP8 output of the norms (fp8=...): the bytes and scales of
fused_quantize_fp8 of the norm's own output (fused_quantize_fp8 is matched
against torchao.float8's scaling in test_quantize_fp8.py), so the fused
passes are exactly the unfused pair, for every kernel the GPU picks
(registers, clusters, shared memory, streaming); close to torch's norm;
residual_out and the statistics unchanged; edges (constant and zero rows,
huge values, inf and NaN), strided rows, compile, CUDA graphs and errors."""

import pytest
import torch
import torch.nn.functional as F
from conftest import random

import fused_ops_py as fo

DTYPES = [torch.float32, torch.float16, torch.bfloat16]  # float64 has no FP8 output
FORMS = [("rowwise", False), ("tensorwise", False), ("tensorwise", True), ("tensorwise", "only")]
# odd widths (streaming), register rows of a warp to a block, rows past a
# block's registers (clusters for RMSNorm, shared memory for LayerNorm
# without a residual, else streaming), 3-d, empty
SHAPES = [(37, 300), (4, 5, 64), (1, 8), (65, 1024), (6, 4096), (3, 16384), (2, 40000), (0, 16), (16, 0)]


def rms(x, residual, weight, bias, **kw):
    return fo.fused_rms_norm(x, weight, **kw)


def add_rms(x, residual, weight, bias, **kw):
    return fo.fused_add_rms_norm(x, residual, weight, **kw)


def layer(x, residual, weight, bias, **kw):
    return fo.fused_layer_norm(x, weight, bias, **kw)


def add_layer(x, residual, weight, bias, **kw):
    return fo.fused_add_layer_norm(x, residual, weight, bias, **kw)


NORMS = {"rms": rms, "add_rms": add_rms, "layer": layer, "add_layer": add_layer}
HAS_RESIDUAL = {"rms": False, "add_rms": True, "layer": False, "add_layer": True}


def codes(y):
    return y.cpu().view(torch.uint8)


def assert_same(got, want):
    assert type(got) is type(want) and len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(a, tuple):
            assert_same(a, b)
            continue
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
        if a.dtype.itemsize == 1:
            assert torch.equal(codes(a), codes(b))
        else:  # NaN where the inputs have it
            torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0, equal_nan=True)


def inputs(shape, dtype, device, seed=0, residual_dtype=None, params=True):
    x = random(shape, dtype, device, seed) * 2 + 0.5
    residual = random(shape, residual_dtype or dtype, device, seed + 1)
    cols = shape[-1]
    weight = random((cols,), dtype, device, seed + 2) if params else None
    bias = random((cols,), dtype, device, seed + 3) if params else None
    return x, residual, weight, bias


def unfused(norm, x, residual, weight, bias, recipe, transpose, **kw):
    """The norm's own output, then fused_quantize_fp8 (e4m3), in the fused call's form."""
    out = norm(x, residual, weight, bias, **kw)
    y, h = out if isinstance(out, tuple) else (out, None)
    cast = fo.fused_quantize_fp8(y, recipe=recipe, transpose=transpose)
    return (cast, h) if h is not None else cast


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("recipe,transpose", FORMS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_is_the_quantized_output_byte_for_byte(device, dtype, name, recipe, transpose, shape):
    norm = NORMS[name]
    x, residual, weight, bias = inputs(shape, dtype, device)
    got = norm(x, residual, weight, bias, fp8=recipe, transpose=transpose)
    assert_same(got, unfused(norm, x, residual, weight, bias, recipe, transpose))


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("recipe,transpose", [("rowwise", False), ("tensorwise", True)])
@pytest.mark.parametrize("shape", [(9, 256), (2, 40000)], ids=str)
@pytest.mark.parametrize("residual_dtype", [torch.float32, torch.bfloat16], ids=str)
def test_variants_residual_dtype_no_params_dropout_offset(device, name, recipe, transpose, shape, residual_dtype):
    norm = NORMS[name]
    x, residual, weight, bias = inputs(shape, torch.bfloat16, device, residual_dtype=residual_dtype)
    cases = [dict(weight=weight, bias=bias), dict(weight=None, bias=None)]
    for case in cases:
        got = norm(x, residual, case["weight"], case["bias"], fp8=recipe, transpose=transpose)
        assert_same(got, unfused(norm, x, residual, case["weight"], case["bias"], recipe, transpose))
    if HAS_RESIDUAL[name]:  # dropout: the same stream from the same seed
        torch.manual_seed(7)
        got = norm(x, residual, weight, bias, fp8=recipe, transpose=transpose, dropout_p=0.25)
        torch.manual_seed(7)
        assert_same(got, unfused(norm, x, residual, weight, bias, recipe, transpose, dropout_p=0.25))
    if name in ("rms", "add_rms"):  # Gemma's offset
        got = norm(x, residual, weight, bias, fp8=recipe, transpose=transpose, offset=1.0)
        assert_same(got, unfused(norm, x, residual, weight, bias, recipe, transpose, offset=1.0))


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
def test_dequantizes_to_torchs_norm_within_the_format_step(device, name, recipe):
    norm = NORMS[name]
    x, residual, weight, bias = inputs((64, 512), torch.float32, device)
    out = norm(x, residual, weight, bias, fp8=recipe)
    (y, scale), h = out if HAS_RESIDUAL[name] else (out, None)
    h64 = (x.double() + residual.double()) if HAS_RESIDUAL[name] else x.double()
    if name in ("rms", "add_rms"):
        want = F.rms_norm(h64, (512,), weight.double(), eps=torch.finfo(torch.float32).eps)
    else:
        want = F.layer_norm(h64, (512,), weight.double(), bias.double(), eps=1e-5)
    step = 2**-4 * (1 + 2**-10)  # half e4m3's spacing, and float's rounding
    tiny = scale.max().item() * 2**-9 + 1e-5  # the subnormal step
    torch.testing.assert_close((y.double() * scale).cpu(), want.cpu(), rtol=step, atol=tiny)


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("recipe,transpose", FORMS)
@pytest.mark.parametrize("cols", [48, 4096])
def test_edges_constant_zero_and_tiny_rows_huge_values_inf_and_nan(device, name, recipe, transpose, cols):
    norm = NORMS[name]
    # (row 7 plain: on CUDA it shares its block with row 6's -inf)
    x, residual, weight, bias = inputs((8, cols), torch.bfloat16, device)
    residual[:3] = 0
    x[0] = 0  # a zero row: zeros (or the bias) and a finite scale
    x[1] = 3.25  # a constant row: y is exactly the bias (variance 0)
    x[2] = 1e-30  # squares below float's range: variance 0 as well
    x[3, 3] = 1e30  # one huge value sets the scale
    x[4, 5], x[5, 7], x[6, 9] = float("inf"), float("nan"), float("-inf")
    got = norm(x, residual, weight, bias, fp8=recipe, transpose=transpose)
    assert_same(got, unfused(norm, x, residual, weight, bias, recipe, transpose))
    scale = (got[0] if HAS_RESIDUAL[name] else got)[1]
    assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("recipe,transpose", FORMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_rows_read_in_place(device, dtype, name, recipe, transpose):
    norm = NORMS[name]
    wide_x, wide_residual, weight, bias = inputs((33, 2 * 136), dtype, device)
    x, residual = wide_x[:, 8:144], wide_residual[:, 100:236]  # rows of 136 in rows of 272
    weight, bias = weight[:136], bias[:136]
    got = norm(x, residual, weight, bias, fp8=recipe, transpose=transpose)
    want = unfused(norm, x.contiguous(), residual.contiguous(), weight, bias, recipe, transpose)
    assert_same(got, want)


@pytest.mark.parametrize("name", NORMS)
def test_replays_in_a_cuda_graph(name):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    norm = NORMS[name]
    x, residual, weight, bias = inputs((256, 4096), torch.bfloat16, "cuda")
    norm(x, residual, weight, bias, fp8="tensorwise", transpose=True)  # plans first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = norm(x, residual, weight, bias, fp8="tensorwise", transpose=True)
    new_x, new_residual, _, _ = inputs((256, 4096), torch.bfloat16, "cuda", seed=5)
    x.copy_(new_x)
    residual.copy_(new_residual)
    graph.replay()
    assert_same(got, unfused(norm, x, residual, weight, bias, "tensorwise", True))


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("recipe,transpose", FORMS)
def test_compiles_to_one_graph(device, name, recipe, transpose):
    norm = NORMS[name]
    torch._dynamo.reset()  # one lambda's code object for every case: no recompile limit
    compiled = torch.compile(
        lambda x, r, w, b: norm(x, r, w, b, fp8=recipe, transpose=transpose), backend="aot_eager", fullgraph=True
    )
    x, residual, weight, bias = inputs((8, 64), torch.bfloat16, device)
    assert_same(compiled(x, residual, weight, bias), unfused(norm, x, residual, weight, bias, recipe, transpose))


@pytest.mark.parametrize("name", NORMS)
def test_errors_name_the_argument_and_value(name):
    norm = NORMS[name]
    x, residual, weight, bias = inputs((4, 8), torch.float32, "cpu")
    fn = {"rms": "fused_rms_norm", "add_rms": "fused_add_rms_norm"}.get(name, f"fused_{name}_norm")
    with pytest.raises(ValueError, match=f"{fn}: recipe='columnwise'"):
        norm(x, residual, weight, bias, fp8="columnwise")
    with pytest.raises(ValueError, match="transpose=True needs recipe='tensorwise'"):
        norm(x, residual, weight, bias, fp8="rowwise", transpose=True)
    with pytest.raises(TypeError, match="float64"):  # (Python or the library names it)
        norm(x, residual, weight.double(), bias, fp8="tensorwise")
    x64, residual64, weight64, bias64 = inputs((4, 8), torch.float64, "cpu")
    with pytest.raises(TypeError, match="dtype float64 has no FP8 output"):
        norm(x64, residual64, weight64, bias64, fp8="rowwise")


def test_a_norm_over_more_than_the_last_dimension_is_refused():
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"fused_layer_norm: fp8='rowwise' takes normalized_shape of x's last"):
        fo.fused_layer_norm(x, normalized_shape=(3, 4), fp8="rowwise")
    with pytest.raises(ValueError, match=r"fused_rms_norm: fp8='tensorwise' takes normalized_shape of x's last"):
        fo.fused_rms_norm(x, torch.ones(3, 4), fp8="tensorwise")
