"""fused_quantize_fp8 against torch's own FP8 conversion of torchao.float8's
scaling, byte for byte; its edges, the transposed copy, the CPU and CUDA
kernels agreeing exactly, compile, CUDA graphs and errors."""

import math

import pytest
import torch
from conftest import DEVICES, fp8_reference, random

import fused_ops_py as fo

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
RECIPES = ["rowwise", "tensorwise"]
# the warp path (rows up to 1024 elements), the block path with the row in
# registers, and with it read again; odd widths take the scalar path on CUDA
SHAPES = [(37, 300), (4, 5, 64), (1, 8), (3, 1024), (6, 4096), (2, 9000), (65, 130), (1,), (0, 16), (16, 0)]


def reference(x, recipe, dtype):
    """(y bytes, scale) as torchao.float8 computes them, NaN as 0x7F."""
    x = x.detach().cpu()
    data, scale = fp8_reference(x, recipe, dtype)
    return torch.where(torch.isnan(x), torch.full_like(data.view(torch.uint8), 0x7F), data.view(torch.uint8)), scale


def codes(y):
    return y.cpu().view(torch.uint8)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("fp8", FP8, ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_torchao_scaling_byte_for_byte(device, dtype, fp8, recipe, shape):
    # magnitudes over nine decades: the subnormals and the top of the range
    x = random(shape, dtype, device) * torch.logspace(-6, 3, shape[-1], device=device).to(dtype)
    y, scale = fo.fused_quantize_fp8(x, recipe=recipe, dtype=fp8)
    want_y, want_scale = reference(x, recipe, fp8)
    assert y.dtype == fp8 and y.shape == x.shape and y.device == x.device
    assert scale.dtype == torch.float32 and scale.shape == want_scale.shape
    assert torch.equal(codes(y), want_y)
    assert torch.equal(scale.cpu(), want_scale)


@pytest.mark.parametrize("recipe", RECIPES)
def test_dequantizes_to_x_within_the_format_step(device, recipe):
    x = random((64, 256), torch.float32, device)
    y, scale = fo.fused_quantize_fp8(x, recipe=recipe)
    back = y.float() * scale
    # e4m3 keeps 3 mantissa bits: a relative step of 2^-4 for normal values
    torch.testing.assert_close(back.cpu(), x.cpu(), rtol=2**-4, atol=scale.max().item() * 2**-9 * 448)
    amax = x.abs().amax(dim=-1, keepdim=True) if recipe == "rowwise" else x.abs().amax()
    top = (amax / scale).cpu()  # the amax maps to the max, or within 2 of it (power-of-two)
    assert bool(((top <= 448) & (top > (224 if recipe == "rowwise" else 447.99))).all())


@pytest.mark.parametrize("recipe", RECIPES)
def test_edges_zero_rows_huge_values_inf_and_nan(device, recipe):
    x = random((4, 32), torch.float32, device)
    x[0] = 0  # zeros and a finite scale
    x[1, 3] = 1e30  # one huge value: the rest of its row goes to (near) zero
    x[2, 5], x[2, 6] = float("inf"), -float("inf")  # saturate at the max
    x[3, 7] = float("nan")  # stays NaN; the rest is quantized as without it
    y, scale = fo.fused_quantize_fp8(x, recipe=recipe)
    b = codes(y)
    assert torch.isfinite(scale).all() and (scale > 0).all()
    if recipe == "rowwise":
        assert bool((b[0] == 0).all())
    huge = y[1, 3].float() * scale.reshape(-1)[1 if recipe == "rowwise" else 0]
    assert abs(huge.item() / 1e30 - 1) <= 2**-4
    assert b[2, 5] == 0x7E and b[2, 6] == 0xFE
    assert b[3, 7] == 0x7F
    want_y, want_scale = reference(x, recipe, torch.float8_e4m3fn)
    assert torch.equal(b, want_y) and torch.equal(scale.cpu(), want_scale)


@pytest.mark.parametrize(
    "shape", [(64, 48), (3, 40, 24), (130, 72), (7, 13), (1, 1), (16, 0), (0, 16), (2, 3, 0)], ids=str
)
@pytest.mark.parametrize("fp8", FP8, ids=["e4m3", "e5m2"])
def test_transposed_copy_is_the_same_bytes_transposed(device, dtype, fp8, shape):
    x = random(shape, dtype, device)
    y, scale, y_t = fo.fused_quantize_fp8(x, recipe="tensorwise", dtype=fp8, transpose=True)
    rows = math.prod(shape[:-1])
    assert y_t.shape == (shape[-1], rows) and y_t.dtype == fp8
    assert torch.equal(codes(y_t), codes(y).reshape(rows, shape[-1]).t())
    want_y, want_scale = reference(x, "tensorwise", fp8)
    assert torch.equal(codes(y), want_y) and torch.equal(scale.cpu(), want_scale)


@pytest.mark.parametrize("shape", [(64, 48), (3, 40, 24), (7, 13), (16, 0), (0, 16)], ids=str)
def test_transposed_copy_alone_is_the_same_bytes(device, dtype, shape):
    x = random(shape, dtype, device)
    _, scale, y_t = fo.fused_quantize_fp8(x, recipe="tensorwise", dtype=torch.float8_e5m2, transpose=True)
    alone, alone_scale = fo.fused_quantize_fp8(x, recipe="tensorwise", dtype=torch.float8_e5m2, transpose="only")
    assert alone.shape == y_t.shape and alone.dtype == torch.float8_e5m2
    assert torch.equal(codes(alone), codes(y_t)) and torch.equal(alone_scale, scale)


@pytest.mark.parametrize("recipe", RECIPES)
def test_strided_rows_read_in_place(device, dtype, recipe):
    base = random((20, 48), dtype, device)
    for x in (base[::3], base[:, 8:40], base.t()):
        y, scale = fo.fused_quantize_fp8(x, recipe=recipe)
        want_y, want_scale = reference(x, recipe, torch.float8_e4m3fn)
        assert torch.equal(codes(y), want_y) and torch.equal(scale.cpu(), want_scale)


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs CUDA")
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("fp8", FP8, ids=["e4m3", "e5m2"])
# a warp a row; a block, the row read again; a warp a row held as loaded (16-bit, aligned), whole and partial
@pytest.mark.parametrize("shape", [(300, 1000), (5, 9000), (64, 4096), (33, 2056)], ids=str)
def test_cpu_and_cuda_write_the_same_bytes(dtype, fp8, recipe, shape):
    x = random(shape, dtype, "cpu") * torch.logspace(-8, 4, shape[1]).to(dtype)
    rows = shape[0]  # specials in rows that exist in every shape
    x[5 % rows, 7], x[9 % rows, 9], x[11 % rows, 11] = float("nan"), float("inf"), 0
    for transpose in (True, "only") if recipe == "tensorwise" else (False,):
        on_cpu = fo.fused_quantize_fp8(x, recipe=recipe, dtype=fp8, transpose=transpose)
        on_gpu = fo.fused_quantize_fp8(x.cuda(), recipe=recipe, dtype=fp8, transpose=transpose)
        for a, b in zip(on_cpu, on_gpu):
            assert torch.equal(a.view(torch.uint8) if a.dtype == fp8 else a, codes(b) if b.dtype == fp8 else b.cpu())


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cpu_and_cuda_agree_on_strided_long_rows(dtype):
    base = random((9, 4160), dtype, "cpu") * 30
    for x in (base[:, 64:], base[::2, :1040], base[:, 4:2052]):  # 16-byte aligned rows, and not
        on_cpu = fo.fused_quantize_fp8(x, recipe="rowwise")
        on_gpu = fo.fused_quantize_fp8(x.cuda(), recipe="rowwise")
        assert torch.equal(on_cpu[0].view(torch.uint8), codes(on_gpu[0])) and torch.equal(on_cpu[1], on_gpu[1].cpu())


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs CUDA")
def test_replays_in_a_cuda_graph():
    x = random((256, 512), torch.bfloat16, "cuda")
    fo.fused_quantize_fp8(x, recipe="tensorwise", transpose=True)  # plans and workspace sizes first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, scale, y_t = fo.fused_quantize_fp8(x, recipe="tensorwise", transpose=True)
    x.copy_(random((256, 512), torch.bfloat16, "cuda", seed=1))
    graph.replay()
    want_y, want_scale = reference(x, "tensorwise", torch.float8_e4m3fn)
    assert torch.equal(codes(y), want_y) and torch.equal(scale.cpu(), want_scale)
    assert torch.equal(codes(y_t), want_y.t())


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiles_to_one_graph(device, recipe):
    compiled = torch.compile(lambda x: fo.fused_quantize_fp8(x, recipe=recipe), backend="aot_eager", fullgraph=True)
    x = random((8, 64), torch.bfloat16, device)
    y, scale = compiled(x)
    want_y, want_scale = reference(x, recipe, torch.float8_e4m3fn)
    assert torch.equal(codes(y), want_y) and torch.equal(scale.cpu(), want_scale)
    if recipe == "tensorwise":
        alone = torch.compile(
            lambda x: fo.fused_quantize_fp8(x, recipe=recipe, transpose="only"), backend="aot_eager", fullgraph=True
        )
        y_t, scale = alone(x)
        assert torch.equal(codes(y_t), want_y.t()) and torch.equal(scale.cpu(), want_scale)


def test_errors_name_the_argument_and_value():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="recipe='columnwise'"):
        fo.fused_quantize_fp8(x, recipe="columnwise")
    with pytest.raises(TypeError, match="dtype=torch.bfloat16"):
        fo.fused_quantize_fp8(x, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="transpose=True needs recipe='tensorwise'"):
        fo.fused_quantize_fp8(x, recipe="rowwise", transpose=True)
    with pytest.raises(TypeError, match="transpose='yes'"):
        fo.fused_quantize_fp8(x, recipe="tensorwise", transpose="yes")
    with pytest.raises(ValueError, match="transpose='only' needs recipe='tensorwise'"):
        fo.fused_quantize_fp8(x, recipe="rowwise", transpose="only")
    with pytest.raises(ValueError, match="0-d"):
        fo.fused_quantize_fp8(torch.tensor(1.0))
    with pytest.raises(TypeError, match="x has dtype torch.int32"):
        fo.fused_quantize_fp8(torch.ones(4, 8, dtype=torch.int32))
