"""Float8Linear against float64 references: the same FP8 operands multiplied in
float64 (tight), and the unquantized linear (within e4m3's and e5m2's rounding)."""

import copy
import math

import pytest
import torch
from conftest import assert_close, fp8_reference, random
from torch import nn

import fused_ops_py as fo
import fused_ops_py.float8_linear as float8_linear
from fused_ops_py.float8_linear import (
    E4M3,
    E5M2,
    RECIPES,
    Float8Input,
    Float8Linear,
    SharedInputCast,
)

IN_FEATURES, OUT_FEATURES = 64, 48
# token counts that are not multiples of 16 (the padded inner dimension of
# grad_weight's GEMM on the GPU)
INPUT_SHAPES = [(24, IN_FEATURES), (2, 5, IN_FEATURES)]
INPUT_DTYPES = [torch.bfloat16, torch.float32]


def dtype_id(dtype):
    return str(dtype).replace("torch.", "")


def quantize_by_hand(x, recipe, dtype):
    """An independent statement of the quantization, one row at a time in
    Python floats: (x_fp8 as float64, scale as a Python float per row)."""
    fmax = torch.finfo(dtype).max
    rows = x.double().reshape(-1, x.shape[-1])
    finite = [[abs(v) for v in row.tolist() if math.isfinite(v)] for row in rows]
    if recipe == "tensorwise":
        everything = max((v for row in finite for v in row), default=0.0)
        amaxes = [everything] * len(finite)
    else:
        amaxes = [max(row, default=0.0) for row in finite]
    data, scales = [], []
    for row, amax in zip(rows, amaxes):
        multiplier = torch.tensor(fmax / max(float(torch.tensor(amax, dtype=torch.float32)), 1e-12)).float().item()
        if recipe == "rowwise":  # rounded down to a power of two
            mantissa, exponent = math.frexp(multiplier)
            multiplier = math.ldexp(0.5, exponent)
        scaled = (row.float() * multiplier).clamp(-fmax, fmax)
        data.append(scaled.to(dtype).double())
        scales.append(torch.tensor(1 / torch.tensor(multiplier).float().item()).float().item())
    return torch.stack(data).reshape(x.shape), scales


@pytest.mark.parametrize("fp8", [E4M3, E5M2], ids=dtype_id)
@pytest.mark.parametrize("recipe", RECIPES)
def test_quantize_matches_by_hand(recipe, fp8):
    x = random((7, 40), torch.float32, "cpu") * torch.logspace(-3, 3, 7).reshape(7, 1)
    x[2] = 0  # a zero row
    x[4, 3] = float("nan")
    x[5, 0] = float("inf")
    data, scale = fp8_reference(x, recipe=recipe, dtype=fp8)
    expected, scales = quantize_by_hand(x, recipe, fp8)
    torch.testing.assert_close(data.double(), expected, rtol=0, atol=0, equal_nan=True)
    if recipe == "rowwise":
        assert scale.shape == (7, 1)
        assert scale.flatten().tolist() == scales
    else:
        assert scale.numel() == 1 and scale.item() == scales[0]


def test_quantize_properties():
    fmax = torch.finfo(E4M3).max
    x = random((6, 32), torch.float32, "cpu") * torch.logspace(-4, 4, 6).reshape(6, 1)
    data, scale = fp8_reference(x, recipe="tensorwise", dtype=E4M3)
    assert scale.dim() == 0 and scale.dtype == torch.float32
    # the element of largest magnitude maps to the format's largest value
    largest = x.abs().argmax()
    assert data.flatten()[largest].float().abs().item() == fmax
    assert data.float().abs().max().item() == fmax

    data, scale = fp8_reference(x, recipe="rowwise", dtype=E4M3)
    row_amax = data.float().abs().amax(dim=1)
    # a power-of-two multiplier takes each row's amax to within a factor 2 of fmax
    assert bool((row_amax > fmax / 2).all()) and bool((row_amax <= fmax).all())
    mantissa, _ = torch.frexp(scale)
    assert bool((mantissa == 0.5).all())
    torch.testing.assert_close(data.float() * scale, x, rtol=2**-4, atol=0)


def test_quantize_edges():
    fmax = torch.finfo(E4M3).max
    x = torch.zeros(4, 16)
    x[1] = torch.linspace(-2, 2, 16)
    x[1, 5] = float("nan")
    x[2, 0], x[2, 1], x[2, 2] = float("inf"), -float("inf"), 1.0
    for recipe in RECIPES:
        data, scale = fp8_reference(x, recipe=recipe, dtype=E4M3)
        assert bool(torch.isfinite(scale).all()) and bool((scale > 0).all())
        assert bool((data[0].float() == 0).all()) and bool((data[3].float() == 0).all())  # zero rows
        assert torch.isnan(data[1, 5].float()) and int(torch.isnan(data.float()).sum()) == 1
        assert data[2, 0].float().item() == fmax and data[2, 1].float().item() == -fmax  # inf saturates
        # NaN and inf are left out of amax: the other values scale as without them
        clean = x.clone()
        clean[1, 5], clean[2, :2] = 0, 0
        expected, expected_scale = fp8_reference(clean, recipe=recipe, dtype=E4M3)
        torch.testing.assert_close(scale, expected_scale, rtol=0, atol=0)
        assert torch.equal(data[1, 6:].float(), expected[1, 6:].float())
    # leading dimensions flatten into rows; the scale keeps them
    data, scale = fp8_reference(random((2, 3, 16), torch.bfloat16, "cpu"), recipe="rowwise", dtype=E4M3)
    assert data.shape == (2, 3, 16) and scale.shape == (2, 3, 1)
    # a transposed view gives dense bytes (the GEMMs' B operands are such casts, transposed back)
    assert fp8_reference(torch.randn(32, 16).t(), recipe="rowwise", dtype=E4M3)[0].is_contiguous()
    for recipe in RECIPES:  # no rows, or rows of nothing
        for shape in [(0, 16), (16, 0)]:
            data, scale = fp8_reference(torch.ones(shape), recipe=recipe, dtype=E4M3)
            assert data.shape == shape and bool(torch.isfinite(scale).all())


def dequantized(x, recipe, dtype):
    data, scale = fp8_reference(x, recipe=recipe, dtype=dtype)
    return data.double() * scale.double()


def expected_fp8_linear(x, weight, bias, grad_out, recipe, x_hp=True):
    """The three GEMMs of the recipe on the operands' FP8 values, in float64."""
    x2 = x.reshape(-1, x.shape[-1])
    dy = grad_out.reshape(-1, grad_out.shape[-1])
    out = dequantized(x2, recipe, E4M3) @ dequantized(weight, recipe, E4M3).t() + bias.double()
    if recipe == "tensorwise":
        dy_deq = dequantized(dy, recipe, E5M2)
        grad_input = dy_deq @ dequantized(weight, recipe, E4M3)
        grad_weight = dy_deq.t() @ dequantized(x2, recipe, E4M3)
    else:
        grad_input = dequantized(dy, recipe, E4M3) @ dequantized(weight.t(), recipe, E4M3).t()
        x_rows = x2 if x_hp else dequantized(x2, recipe, E4M3)
        grad_weight = dequantized(dy.t(), recipe, E4M3) @ dequantized(x_rows.t(), recipe, E4M3).t()
    grad_bias = dy.double().sum(0)
    return out.reshape(grad_out.shape), grad_input.reshape(x.shape), grad_weight, grad_bias


def sqnr_db(actual, expected):
    expected = expected.double()
    noise = (actual.double() - expected).pow(2).sum()
    return (10 * torch.log10(expected.pow(2).sum() / noise)).item()


def make_layer(recipe, dtype, seed=1):
    torch.manual_seed(seed)
    linear = nn.Linear(IN_FEATURES, OUT_FEATURES, dtype=dtype)
    return linear, Float8Linear.from_linear(linear, recipe=recipe)


# Rounding to nearest in a format with m mantissa bits errs by at most 2^-(m+1)
# of the value, so an operand's noise-to-signal power is at most 2^-2(m+1) / 3
# (uniform error): 28.8 dB for e4m3 (m=3), 22.8 dB for e5m2 (m=2). A GEMM of two
# quantized operands adds both noises: 25.8 dB for e4m3 x e4m3, 21.8 dB for
# e5m2 x e4m3 (tensorwise gradients), and a third e4m3 rounding (rowwise
# grad_weight from FP8 bytes alone) 24.0 dB. The bounds sit below those.
SQNR_E4M3, SQNR_E5M2, SQNR_REQUANTIZED = 25.0, 20.0, 23.0


@pytest.mark.parametrize("dtype", INPUT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", INPUT_SHAPES, ids=str)
@pytest.mark.parametrize("recipe", RECIPES)
def test_forward_backward(recipe, shape, dtype):
    linear, layer = make_layer(recipe, dtype)
    x = random(shape, dtype, "cpu", seed=2).requires_grad_()
    grad_out = random(shape[:-1] + (OUT_FEATURES,), dtype, "cpu", seed=3)
    out = layer(x)
    out.backward(grad_out)
    assert out.dtype == dtype and out.shape == grad_out.shape

    expected = expected_fp8_linear(x.detach(), linear.weight.detach(), linear.bias.detach(), grad_out, recipe)
    actual = (out, x.grad, linear.weight.grad, linear.bias.grad)
    for got, want in zip(actual, expected):
        assert got.dtype == dtype
        assert_close(got, want, dtype)

    # against the unquantized linear in float64
    x64 = x.detach().double().requires_grad_()
    w64 = linear.weight.detach().double().requires_grad_()
    b64 = linear.bias.detach().double().requires_grad_()
    exact = nn.functional.linear(x64, w64, b64)
    exact.backward(grad_out.double())
    grad_bound = SQNR_E5M2 if recipe == "tensorwise" else SQNR_E4M3
    assert sqnr_db(out, exact) > SQNR_E4M3
    assert sqnr_db(x.grad, x64.grad) > grad_bound
    assert sqnr_db(linear.weight.grad, w64.grad) > grad_bound
    assert_close(linear.bias.grad, b64.grad, dtype)


@pytest.mark.parametrize("recipe", RECIPES)
def test_float8_input(recipe):
    """A pre-quantized input gives what the layer's own cast gives; without hp
    the input is a constant and the output takes the weight's dtype."""
    dtype = torch.bfloat16
    linear, layer = make_layer(recipe, dtype)
    x = random((3, 8, IN_FEATURES), dtype, "cpu", seed=2)
    grad_out = random((3, 8, OUT_FEATURES), dtype, "cpu", seed=3)

    plain = x.clone().requires_grad_()
    out = layer(plain)
    out.backward(grad_out)
    plain_grads = [plain.grad, linear.weight.grad.clone(), linear.bias.grad.clone()]

    linear.weight.grad = linear.bias.grad = None
    hp = x.clone().requires_grad_()
    data, scale = fp8_reference(x, recipe=recipe, dtype=E4M3)
    carried = layer(Float8Input(data, scale, hp))
    carried.backward(grad_out)
    assert torch.equal(carried, out)
    for got, want in zip([hp.grad, linear.weight.grad, linear.bias.grad], plain_grads):
        assert torch.equal(got, want)

    linear.weight.grad = linear.bias.grad = None
    constant = layer(Float8Input(data, scale))
    assert torch.equal(constant, out)  # the weight's dtype is the input's here
    constant.backward(grad_out)
    if recipe == "tensorwise":  # the weight gradient reads the same bytes
        assert torch.equal(linear.weight.grad, plain_grads[1])
    else:  # x dequantized from its bytes, then quantized along the tokens
        weight = linear.weight.detach()
        want = expected_fp8_linear(x, weight, linear.bias.detach(), grad_out, recipe, x_hp=False)[2]
        assert_close(linear.weight.grad, want, dtype)
        exact = grad_out.double().reshape(-1, OUT_FEATURES).t() @ x.double().reshape(-1, IN_FEATURES)
        assert sqnr_db(linear.weight.grad, exact) > SQNR_REQUANTIZED


@pytest.mark.parametrize("recipe", RECIPES)
def test_gemm_operands_fit_scaled_mm(recipe, monkeypatch):
    """Each GEMM hands the emulation what torch._scaled_mm takes on the GPU
    (which CI cannot run): a row-major A, a column-major B, not both e5m2,
    float32 scales of one element, or [M, 1] and [1, N]."""
    emulate, seen = float8_linear._emulated_scaled_mm, []

    def checked(a, b, scale_a, scale_b, out_dtype, bias=None):
        (m, k), (k_b, n) = a.shape, b.shape
        assert k == k_b and a.stride(1) == 1 and b.stride(0) == 1
        assert {a.dtype, b.dtype} <= {E4M3, E5M2} and not a.dtype == b.dtype == E5M2
        assert scale_a.dtype == scale_b.dtype == torch.float32
        if recipe == "rowwise":
            assert scale_a.shape == (m, 1) and scale_b.shape == (1, n)
        else:
            assert scale_a.numel() == scale_b.numel() == 1
        seen.append((m, n, k))
        return emulate(a, b, scale_a, scale_b, out_dtype, bias)

    monkeypatch.setattr(float8_linear, "_emulated_scaled_mm", checked)
    _, layer = make_layer(recipe, torch.bfloat16)
    x = random((2, 5, IN_FEATURES), torch.bfloat16, "cpu", seed=2).requires_grad_()
    layer(x).sum().backward()
    data, scale = fp8_reference(x.detach(), recipe=recipe, dtype=E4M3)
    assert data.is_contiguous()
    layer(Float8Input(data.transpose(0, 1).contiguous().transpose(0, 1), scale)).sum().backward()
    tokens = 10
    once = [
        (tokens, OUT_FEATURES, IN_FEATURES),
        (tokens, IN_FEATURES, OUT_FEATURES),
        (OUT_FEATURES, IN_FEATURES, tokens),
    ]
    assert seen == once + [once[0], once[2]]


@pytest.mark.parametrize("recipe", RECIPES)
def test_no_tokens(recipe):
    linear, layer = make_layer(recipe, torch.bfloat16)
    x = torch.ones(0, IN_FEATURES, dtype=torch.bfloat16, requires_grad=True)
    out = layer(x)
    out.sum().backward()
    assert out.shape == (0, OUT_FEATURES) and x.grad.shape == x.shape
    assert not linear.weight.grad.any() and not linear.bias.grad.any()


def test_from_linear_keeps_parameters():
    linear = nn.Linear(IN_FEATURES, OUT_FEATURES, dtype=torch.bfloat16)
    layer = Float8Linear.from_linear(linear, recipe="rowwise")
    assert layer.weight is linear.weight and layer.bias is linear.bias
    assert list(layer.state_dict()) == list(linear.state_dict()) == ["weight", "bias"]
    assert "recipe='rowwise'" in repr(layer)
    unbiased = Float8Linear.from_linear(nn.Linear(IN_FEATURES, OUT_FEATURES, bias=False))
    assert unbiased.bias is None and list(unbiased.state_dict()) == ["weight"]

    built = Float8Linear(IN_FEATURES, OUT_FEATURES, dtype=torch.bfloat16)
    built.load_state_dict(linear.state_dict())
    assert built.weight.dtype == torch.bfloat16 and torch.equal(built.weight, linear.weight)
    assert "recipe='tensorwise'" in repr(built)


def test_errors():
    with pytest.raises(ValueError, match="in_features=40 must be a positive multiple of 16"):
        Float8Linear(40, 32)
    with pytest.raises(ValueError, match="in_features=20"):
        Float8Linear.from_linear(nn.Linear(20, 32))
    with pytest.raises(ValueError, match="out_features=24"):
        Float8Linear(32, 24)
    with pytest.raises(ValueError, match="recipe='blockwise' must be one of 'tensorwise', 'rowwise'"):
        Float8Linear(32, 32, recipe="blockwise")
    with pytest.raises(ValueError, match="recipe='axiswise'"):
        Float8Linear.from_linear(nn.Linear(32, 32), recipe="axiswise")
    with pytest.raises(TypeError, match="linear.weight has dtype torch.float64"):
        Float8Linear.from_linear(nn.Linear(32, 32, dtype=torch.float64))
    layer = Float8Linear(32, 32, recipe="rowwise")
    with pytest.raises(ValueError, match=r"x has shape \(4, 16\); its last dimension must be 32"):
        layer(torch.randn(4, 16))
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        layer(torch.randn(4, 32, dtype=torch.float64))
    data, scale = fp8_reference(torch.randn(4, 32), recipe="tensorwise", dtype=E4M3)
    with pytest.raises(ValueError, match=r"Float8Input.scale has shape \(\).*\(4, 1\)"):
        layer(Float8Input(data, scale))
    with pytest.raises(TypeError, match="Float8Input.data has dtype torch.float8_e5m2"):
        layer(Float8Input(data.to(E5M2), scale))


# aot_eager traces forward and backward whole as inductor does (fullgraph is
# dynamo's); one inductor case (10 s on 2 cores) covers code generation too.
@pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 5),
    reason="torch 2.4's dynamo refuses tensor attributes (is_cpu, stride) inside an autograd.Function",
)
@pytest.mark.parametrize(
    "recipe, dtype, backend",
    [
        ("tensorwise", torch.float32, "aot_eager"),
        ("rowwise", torch.float32, "aot_eager"),
        ("rowwise", torch.bfloat16, "inductor"),
    ],
)
def test_compile_fullgraph(recipe, dtype, backend):
    torch._dynamo.reset()
    linear, layer = make_layer(recipe, dtype)
    compiled = torch.compile(layer, fullgraph=True, backend=backend)
    x = random((24, IN_FEATURES), dtype, "cpu", seed=2)
    grad_out = random((24, OUT_FEATURES), dtype, "cpu", seed=3)
    grads = []
    for module in (layer, compiled):
        linear.weight.grad = linear.bias.grad = None
        leaf = x.clone().requires_grad_()
        out = module(leaf)
        out.backward(grad_out)
        grads.append((out, leaf.grad, linear.weight.grad, linear.bias.grad))
    for eager, traced in zip(*grads):
        assert_close(traced, eager, dtype)


@pytest.mark.parametrize("recipe", RECIPES)
def test_only_the_wanted_gradients_are_computed_and_saved(recipe):
    linear, layer = make_layer(recipe, torch.float32)
    x = random((24, IN_FEATURES), torch.float32, "cpu", seed=2).requires_grad_()
    grad_out = random((24, OUT_FEATURES), torch.float32, "cpu", seed=3)
    full = torch.autograd.grad(layer(x), (x, layer.weight), grad_out)
    layer.weight.requires_grad_(False)  # a frozen weight: dx alone, x's bytes not kept, only the weight
    out = layer(x)
    saved = [t for t in out.grad_fn.saved_tensors if t is not None]
    assert len(saved) == 1 and saved[0] is layer.weight
    assert torch.equal(torch.autograd.grad(out, x, grad_out)[0], full[0])
    layer.weight.requires_grad_(True)
    out = layer(x.detach())  # an input without a gradient: dW alone, the weight's bytes not kept
    assert torch.equal(torch.autograd.grad(out, layer.weight, grad_out)[0], full[1])


def test_a_transposed_copy_in_the_input_gives_the_same_gradients():
    """Float8Input's data_t (tensorwise): the weight gradient reads it instead
    of transposing data, and every result is the same."""
    dtype = torch.bfloat16
    linear, layer = make_layer("tensorwise", dtype)
    x = random((3, 8, IN_FEATURES), dtype, "cpu", seed=2)
    grad_out = random((3, 8, OUT_FEATURES), dtype, "cpu", seed=3)
    results = []
    for transposed in (False, True):
        linear.weight.grad = linear.bias.grad = None
        hp = x.clone().requires_grad_()
        data, scale, *data_t = fo.fused_quantize_fp8(x, recipe="tensorwise", transpose=transposed)
        out = layer(Float8Input(data, scale, hp, *data_t))
        out.backward(grad_out)
        results.append((out, hp.grad, linear.weight.grad, linear.bias.grad))
    for without, with_t in zip(*results):
        assert torch.equal(with_t, without)
    data, scale, data_t = fo.fused_quantize_fp8(x, recipe="tensorwise", transpose=True)
    with pytest.raises(ValueError, match=r"Float8Input.data_t has shape \(24, 64\).*shape \(64, 24\)"):
        layer(Float8Input(data, scale, x, data_t.t()))
    _, rowwise = make_layer("rowwise", dtype)
    data, scale = fo.fused_quantize_fp8(x, recipe="rowwise")
    with pytest.raises(ValueError, match="only for recipe 'tensorwise'"):
        rowwise(Float8Input(data, scale, x, data_t))


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_shared_cast_gives_each_reader_its_own_results(recipe, monkeypatch):
    """Three layers reading one input through a SharedInputCast: one cast of
    it, and outputs and gradients equal to each casting for itself; an input
    written in place between readers is cast again."""
    layers = [make_layer(recipe, torch.bfloat16)[1] for _ in range(3)]
    for i, layer in enumerate(layers):
        with torch.no_grad():
            layer.weight.mul_(1 + i)
    x = random((3, 8, IN_FEATURES), torch.bfloat16, "cpu", seed=2)
    grad_out = random((3, 8, OUT_FEATURES), torch.bfloat16, "cpu", seed=3)
    casts = []
    quantize = float8_linear.quantize_fp8
    monkeypatch.setattr(float8_linear, "quantize_fp8", lambda t, **kw: casts.append(t) or quantize(t, **kw))
    results = []
    for shared in (None, SharedInputCast(3)):
        for layer in layers:
            layer.input_cast = shared
            layer.weight.grad = layer.bias.grad = None
        hp = x.clone().requires_grad_()
        del casts[:]
        outs = [layer(hp) for layer in layers]
        input_casts = sum(t is hp for t in casts)
        torch.autograd.backward(outs, [grad_out] * 3)
        results.append((input_casts, outs, hp.grad, [(layer.weight.grad, layer.bias.grad) for layer in layers]))
    (alone, *unshared), (together, *shared_results) = results
    assert (alone, together) == (3, 1)
    assert all(torch.equal(a, b) for a, b in zip(unshared[0], shared_results[0]))
    assert torch.equal(unshared[1], shared_results[1])
    assert all(torch.equal(a, b) for pa, pb in zip(unshared[2], shared_results[2]) for a, b in zip(pa, pb))

    cast = SharedInputCast(2)
    y = x.clone()
    first = cast(y, recipe, False)
    y.add_(1)  # written between the readers: the second casts it again
    second = cast(y, recipe, False)
    assert torch.equal(second.data.view(torch.uint8), fo.fused_quantize_fp8(y, recipe=recipe)[0].view(torch.uint8))
    assert not torch.equal(first.data.view(torch.uint8), second.data.view(torch.uint8))


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
    reason="torchao.float8 needs a GPU of compute capability 8.9",
)
@pytest.mark.parametrize("recipe", RECIPES)
def test_each_gemm_is_as_accurate_as_torchaos(recipe):
    """The output, grad_input and grad_weight GEMMs against float64, for this
    Float8Linear and torchao.float8's of the same recipe on the same inputs
    (with an outlier column, as activations have): no GEMM's signal-to-noise
    ratio may fall below torchao's (0.05 dB for rounding ties)."""
    torchao_float8 = pytest.importorskip("torchao.float8", reason="torchao is not installed")
    torch.manual_seed(0)
    linear = nn.Linear(1024, 768, bias=False, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(4, 512, 1024, dtype=torch.bfloat16, device="cuda")
    x[..., 7] *= 40
    dy = torch.randn(4, 512, 768, dtype=torch.bfloat16, device="cuda") * 1e-3
    x64 = x.double().requires_grad_()
    w64 = linear.weight.detach().double().requires_grad_()
    exact = nn.functional.linear(x64, w64)
    exact.backward(dy.double())
    expected = (exact, x64.grad, w64.grad)

    def gemms(module, weight):
        xg = x.clone().requires_grad_()
        out = module(xg)
        out.backward(dy)
        return [sqnr_db(got, want) for got, want in zip((out, xg.grad, weight.grad), expected)]

    ours = Float8Linear.from_linear(copy.deepcopy(linear), recipe=recipe)
    theirs = nn.Sequential(copy.deepcopy(linear))
    config = torchao_float8.Float8LinearConfig.from_recipe_name(recipe)
    torchao_float8.convert_to_float8_training(theirs, config=config)
    assert type(theirs[0]).__name__ == "Float8Linear"
    mine, torchao = gemms(ours, ours.weight), gemms(theirs, theirs[0].weight)
    print(f"{recipe} SQNR dB (out, grad_input, grad_weight): ours {mine}, torchao {torchao}")
    for name, a, b in zip(("out", "grad_input", "grad_weight"), mine, torchao):
        assert a >= b - 0.05, f"{name}: {a:.2f} dB against torchao's {b:.2f}"
