"""The FP8 output of SwiGLU and GeGLU (fp8=...): the bytes and scales of
fused_quantize_fp8 of the gate's own output (itself matched against
torchao.float8's scaling in test_quantize_fp8.py), so the fused pass is
exactly the unfused pair; close to torch's gate; edges, strided rows, the
transposed copy, compile, CUDA graphs and errors."""

import pytest
import torch
import torch.nn.functional as F
from conftest import random

import fused_ops_py as fo

FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
# (recipe, transpose): the forms fused_quantize_fp8 takes
FORMS = [("rowwise", False), ("tensorwise", False), ("tensorwise", True), ("tensorwise", "only")]
# warp rows, block rows held in registers, block rows read again; odd widths take the scalar path
SHAPES = [(37, 300), (4, 5, 64), (1, 8), (3, 1024), (6, 4096), (2, 9000), (65, 130), (0, 16), (16, 0)]
GATES = {
    "swiglu": (fo.fused_swiglu, {}, lambda g, u: F.silu(g) * u),
    "geglu_tanh": (fo.fused_geglu, {"approximate": "tanh"}, lambda g, u: F.gelu(g, approximate="tanh") * u),
    "geglu_erf": (fo.fused_geglu, {"approximate": "none"}, lambda g, u: F.gelu(g) * u),
}


def codes(y):
    return y.cpu().view(torch.uint8)


def assert_same_output(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
        if a.dtype.itemsize == 1:
            assert torch.equal(codes(a), codes(b))
        else:
            assert torch.equal(a.cpu(), b.cpu())


def inputs(shape, dtype, device, seed=0):
    gate = random(shape, dtype, device, seed) * 3
    up = random(shape, dtype, device, seed + 1)
    return gate, up


@pytest.mark.parametrize("gate_name", GATES)
@pytest.mark.parametrize("recipe,transpose", FORMS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_is_the_quantized_output_byte_for_byte(device, dtype, gate_name, recipe, transpose, shape):
    fn, kwargs, _ = GATES[gate_name]
    gate, up = inputs(shape, dtype, device)
    got = fn(gate, up, **kwargs, fp8=recipe, transpose=transpose)
    want = fo.fused_quantize_fp8(fn(gate, up, **kwargs), recipe=recipe, transpose=transpose)
    assert_same_output(got, want)


@pytest.mark.parametrize("gate_name", GATES)
@pytest.mark.parametrize("fp8", FP8, ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
def test_dequantizes_to_torchs_gate_within_the_format_step(device, gate_name, fp8, recipe):
    fn, kwargs, torch_gate = GATES[gate_name]
    gate, up = inputs((64, 512), torch.float32, device)
    y, scale = fn(gate, up, **kwargs, fp8=recipe, fp8_dtype=fp8)
    want = torch_gate(gate.double(), up.double()).float()
    # half the spacing of 3 or 2 mantissa bits, and the gate's own float rounding beside the float64 reference
    step = (2**-4 if fp8 is torch.float8_e4m3fn else 2**-3) * (1 + 2**-10)
    tiny = scale.max().item() * (2**-9 if fp8 is torch.float8_e4m3fn else 2**-16)  # the subnormal step
    # float's absolute error of act(g) * u, which e5m2's range exposes where act(g) is tiny (the tanh
    # GELU's 1 + tanh(y) near y = -8 on CUDA)
    tiny += 2**-20 * (gate * up).abs().max().item()
    torch.testing.assert_close((y.float() * scale).cpu(), want.cpu(), rtol=step, atol=tiny)


@pytest.mark.parametrize("gate_name", GATES)
@pytest.mark.parametrize("recipe,transpose", FORMS)
def test_edges_zero_rows_huge_values_inf_and_nan(device, gate_name, recipe, transpose):
    fn, kwargs, _ = GATES[gate_name]
    gate, up = inputs((5, 48), torch.bfloat16, device)
    gate[0] = 0  # a zero row: zeros and a finite scale
    up[1, 3] = 1e30  # one huge value sets the scale
    gate[2, 5], gate[3, 7], up[4, 9] = float("inf"), float("nan"), float("-inf")
    got = fn(gate, up, **kwargs, fp8=recipe, transpose=transpose)
    want = fo.fused_quantize_fp8(fn(gate, up, **kwargs), recipe=recipe, transpose=transpose)
    assert_same_output(got, want)
    scale = got[1]
    assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
    y = got[0] if transpose != "only" else got[0].t()
    assert codes(y)[3, 7] & 0x7F == 0x7F  # NaN stays NaN


@pytest.mark.parametrize("gate_name", GATES)
@pytest.mark.parametrize("recipe,transpose", FORMS)
def test_strided_rows_read_in_place(device, dtype, gate_name, recipe, transpose):
    fn, kwargs, _ = GATES[gate_name]
    wide_gate, wide_up = inputs((33, 2 * 136), dtype, device)
    gate, up = wide_gate[:, 8:144], wide_up[:, 100:236]  # rows of 136 in rows of 272
    got = fn(gate, up, **kwargs, fp8=recipe, transpose=transpose)
    want = fo.fused_quantize_fp8(fn(gate.contiguous(), up.contiguous(), **kwargs), recipe=recipe, transpose=transpose)
    assert_same_output(got, want)


@pytest.mark.parametrize("gate_name", GATES)
def test_replays_in_a_cuda_graph(gate_name):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    fn, kwargs, _ = GATES[gate_name]
    gate, up = inputs((256, 512), torch.bfloat16, "cuda")
    fn(gate, up, **kwargs, fp8="tensorwise", transpose=True)  # plans first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = fn(gate, up, **kwargs, fp8="tensorwise", transpose=True)
    new_gate, new_up = inputs((256, 512), torch.bfloat16, "cuda", seed=5)
    gate.copy_(new_gate)
    up.copy_(new_up)
    graph.replay()
    assert_same_output(got, fo.fused_quantize_fp8(fn(gate, up, **kwargs), recipe="tensorwise", transpose=True))


@pytest.mark.parametrize("gate_name", GATES)
@pytest.mark.parametrize("recipe,transpose", FORMS)
def test_compiles_to_one_graph(device, gate_name, recipe, transpose):
    fn, kwargs, _ = GATES[gate_name]
    torch._dynamo.reset()  # one lambda's code object for every case: no recompile limit
    compiled = torch.compile(
        lambda g, u: fn(g, u, **kwargs, fp8=recipe, transpose=transpose), backend="aot_eager", fullgraph=True
    )
    gate, up = inputs((8, 64), torch.bfloat16, device)
    want = fo.fused_quantize_fp8(fn(gate, up, **kwargs), recipe=recipe, transpose=transpose)
    assert_same_output(compiled(gate, up), want)


@pytest.mark.parametrize("gate_name", GATES)
def test_errors_name_the_argument_and_value(gate_name):
    fn, kwargs, _ = GATES[gate_name]
    gate, up = inputs((4, 8), torch.float32, "cpu")
    name = fn.__name__
    with pytest.raises(ValueError, match=f"{name}: recipe='columnwise'"):
        fn(gate, up, **kwargs, fp8="columnwise")
    with pytest.raises(TypeError, match="dtype=torch.bfloat16"):
        fn(gate, up, **kwargs, fp8="rowwise", fp8_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="transpose=True needs recipe='tensorwise'"):
        fn(gate, up, **kwargs, fp8="rowwise", transpose=True)
    with pytest.raises(TypeError, match="up has dtype torch.float64"):
        fn(gate, up.double(), **kwargs, fp8="tensorwise")
