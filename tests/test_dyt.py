"""fused_dyt and FusedDyT (DyT, "Transformers without Normalization") against
torch in float64: every gradient, parameter dtypes, strides, determinism,
compile and bad arguments."""

import pytest
import torch
from conftest import TOLERANCES, assert_close, random

import fused_ops_py as fo
from fused_ops_py import _core

SHAPES = [(0, 8), (5, 0), (1, 1), (1,), (7, 13), (1, 4099), (257, 1), (31, 257), (3, 70001), (2, 3, 17), (64, 1024)]


def reference(x, alpha, weight, bias):
    """Liger's LigerDyT and the paper's: weight * tanh(alpha * x) + bias."""
    y = weight * torch.tanh(alpha * x)
    return y + bias if bias is not None else y


def inputs(shape, dtype, device, param_dtype=None, bias=True, seed=0):
    """x (of scale 2: tanh saturates in places), alpha, weight, bias."""
    param_dtype = param_dtype or dtype
    cols = shape[-1]
    x = (random(shape, torch.float64, device, seed) * 2).to(dtype)
    alpha = torch.tensor([0.7], dtype=param_dtype, device=device)
    weight = random((cols,), param_dtype, device, seed + 1)
    b = random((cols,), param_dtype, device, seed + 2) if bias else None
    return x, alpha, weight, b


def assert_sum_close(actual, expected, magnitude, dtype):
    """A gradient summed over many elements: its error grows with the sum of
    the terms' magnitudes (magnitude), not with the result."""
    tolerance = TOLERANCES[dtype]
    actual, expected = actual.cpu().double(), expected.cpu().double()
    bound = tolerance["atol"] + tolerance["rtol"] * (magnitude + expected.abs())
    error = (actual - expected).abs()
    assert (error <= bound).all(), f"largest error {error.max()}, bounds {bound.min()}.."


def check_against_float64(x, alpha, weight, bias, dy, dtype):
    tensors = [t for t in (x, alpha, weight, bias) if t is not None]
    for t in tensors:
        t.requires_grad_()
    y = fo.fused_dyt(x, alpha, weight, bias)
    assert y.shape == x.shape and y.dtype == x.dtype
    grads = torch.autograd.grad(y, tensors, dy)
    exact = [t.detach().double().requires_grad_() for t in tensors]
    x64, alpha64, weight64 = exact[:3]
    bias64 = exact[3] if bias is not None else None
    expected = reference(x64, alpha64, weight64, bias64)
    assert_close(y, expected, dtype)
    expected_grads = torch.autograd.grad(expected, exact, dy.double())
    assert_close(grads[0], expected_grads[0], dtype)
    slope = 1 - torch.tanh(alpha64 * x64).detach() ** 2
    column_terms = dy.double().abs().flatten(0, -2).sum(0) if dy.dim() > 1 else dy.double().abs()
    terms = {  # |each term| of the sums
        1: (dy.double() * weight64.detach() * x64.detach() * slope).abs().sum(),
        2: column_terms,
        3: column_terms,
    }
    for i in range(1, len(tensors)):
        assert grads[i].dtype == tensors[i].dtype and grads[i].shape == tensors[i].shape
        assert_sum_close(grads[i], expected_grads[i], terms[i].cpu(), tensors[i].dtype)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_every_gradient(shape, bias, dtype, device):
    x, alpha, weight, b = inputs(shape, dtype, device, bias=bias)
    dy = random(shape, dtype, device, seed=9)
    check_against_float64(x, alpha, weight, b, dy, dtype)


@pytest.mark.parametrize("alpha", [-0.7, 0.0], ids=["negative", "zero"])
def test_negative_and_zero_alpha(alpha, dtype, device):
    """alpha's sign reaches every gradient; rows of over 2048 columns, more
    rows than the CUDA backward has row blocks."""
    x, _, weight, b = inputs((300, 2056), dtype, device)
    alpha = torch.tensor([alpha], dtype=dtype, device=device)
    check_against_float64(x, alpha, weight, b, random((300, 2056), dtype, device, seed=5), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_float32_parameters_beside_half_x(dtype, device):
    x, alpha, weight, b = inputs((33, 200), dtype, device, param_dtype=torch.float32)
    check_against_float64(x, alpha, weight, b, random((33, 200), dtype, device, seed=3), dtype)


def test_strided_input_and_expanded_gradient(device):
    wide = random((12, 90), torch.float32, device, seed=4)
    x = wide[:, 3:67]  # rows of a wider tensor
    _, alpha, weight, b = inputs((12, 64), torch.float32, device)
    check_against_float64(x, alpha, weight, b, torch.ones(12, 64, device=device).expand(12, 64), torch.float32)
    column = random((40, 1), torch.float32, device, seed=5).expand(40, 16)  # stride-0 rows
    _, alpha, weight, b = inputs((40, 16), torch.float32, device, seed=6)
    check_against_float64(column, alpha, weight, b, random((40, 16), torch.float32, device, seed=7), torch.float32)


def test_gradients_are_bitwise_deterministic(device):
    x, alpha, weight, b = inputs((4096, 384), torch.float32, device, seed=11)
    dy = random((4096, 384), torch.float32, device, seed=12)
    threads = torch.get_num_threads()
    runs = []
    for n in (threads, 1, threads):  # on the CPU, also 1 thread against many
        torch.set_num_threads(n)
        tensors = [t.detach().requires_grad_() for t in (x, alpha, weight, b)]
        runs.append(torch.autograd.grad(fo.fused_dyt(*tensors), tensors, dy))
    torch.set_num_threads(threads)
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))


def test_only_the_gradients_wanted(device):
    x, alpha, weight, b = inputs((9, 40), torch.float32, device)
    weight.requires_grad_()
    y = fo.fused_dyt(x, alpha, weight, b)
    (dweight,) = torch.autograd.grad(y, weight, torch.ones_like(y))
    expected = torch.tanh(alpha.double() * x.double()).sum(0)
    assert_close(dweight, expected, torch.float32)


def test_gradcheck_in_float64(device):
    x, alpha, weight, b = inputs((6, 11), torch.float64, device)
    tensors = tuple(t.requires_grad_() for t in (x, alpha, weight, b))
    assert torch.autograd.gradcheck(fo.fused_dyt, tensors)


def test_no_grad_records_nothing(device):
    x, alpha, weight, b = inputs((5, 40), torch.float32, device)
    weight.requires_grad_()
    with torch.no_grad():
        y = fo.fused_dyt(x, alpha, weight, b)
    assert y.grad_fn is None
    assert_close(y, reference(x.double(), alpha.double(), weight.detach().double(), b.double()), torch.float32)


def test_module_owns_alpha_weight_and_bias(device):
    module = fo.FusedDyT(48, init_alpha=0.25, device=device, dtype=torch.bfloat16)
    assert dict(module.named_parameters()).keys() == {"alpha", "weight", "bias"}
    assert module.alpha.shape == (1,) and module.alpha.item() == 0.25
    assert torch.equal(module.weight, torch.ones(48, dtype=torch.bfloat16, device=device))
    assert torch.equal(module.bias, torch.zeros(48, dtype=torch.bfloat16, device=device))
    module.weight.data.normal_()
    module.bias.data.normal_()
    x = random((3, 5, 48), torch.bfloat16, device, seed=2)
    expected = reference(x.double(), module.alpha.double(), module.weight.double(), module.bias.double())
    assert_close(module(x), expected.detach(), torch.bfloat16)
    plain = fo.FusedDyT((48,), bias=False)
    assert plain.bias is None and "bias=False" in repr(plain)


@pytest.mark.skipif(not _core.AVAILABLE, reason="torch.compile support needs torch >= 2.4")
def test_compiles_to_one_graph_with_its_gradients(device):
    x, alpha, weight, b = inputs((5, 40), torch.float32, device)
    compiled = torch.compile(fo.fused_dyt, backend="aot_eager", fullgraph=True)
    tensors = [t.requires_grad_() for t in (x, alpha, weight, b)]
    y = compiled(*tensors)
    grads = torch.autograd.grad(y, tensors, torch.ones_like(y))
    eager = [t.detach().requires_grad_() for t in tensors]
    y_eager = fo.fused_dyt(*eager)
    assert torch.equal(y, y_eager)
    assert all(torch.equal(a, e) for a, e in zip(grads, torch.autograd.grad(y_eager, eager, torch.ones_like(y))))


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(x=[1.0]), TypeError, "x must be a torch.Tensor, got list"),
        (dict(x=torch.zeros(())), ValueError, "x is 0-d"),
        (dict(x=torch.zeros(3, 8, dtype=torch.int64)), TypeError, "x has dtype torch.int64"),
        (dict(alpha=torch.ones(2)), ValueError, r"alpha has shape \(2,\); it must hold one element"),
        (dict(weight=torch.ones(7)), ValueError, r"weight has shape \(7,\) but must be \(8,\)"),
        (dict(bias=torch.ones(3, 8)), ValueError, r"bias has shape \(3, 8\) but must be \(8,\)"),
        (dict(bias=torch.ones(8, dtype=torch.float64)), TypeError, "bias has dtype torch.float64 but weight has"),
        (
            dict(alpha=torch.ones(1, dtype=torch.float64), weight=torch.ones(8, dtype=torch.float64), bias=None),
            TypeError,
            "the parameters have dtype torch.float64 but x has torch.float32",
        ),
    ],
)
def test_bad_arguments_name_the_argument(change, error, message):
    arguments = dict(x=torch.zeros(3, 8), alpha=torch.ones(1), weight=torch.ones(8), bias=torch.zeros(8)) | change
    with pytest.raises(error, match=f"fused_dyt: {message}"):
        fo.fused_dyt(**arguments)
