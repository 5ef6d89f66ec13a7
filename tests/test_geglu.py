"""fused_geglu against torch in float64: gelu (tanh or erf) of gate times up."""

import pytest
import torch
import torch.nn.functional as F
from conftest import SHAPES, assert_close, random, requires_gpu

import fused_ops_py as fo

APPROXIMATIONS = ["tanh", "none"]


def reference(gate, up, approximate):
    return F.gelu(gate, approximate=approximate) * up


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_gradients(shape, approximate, dtype, device):
    gate = random(shape, dtype, device, seed=1).requires_grad_()
    up = random(shape, dtype, device, seed=2).requires_grad_()
    y = fo.fused_geglu(gate, up, approximate=approximate)
    g64, u64 = (t.detach().double().requires_grad_() for t in (gate, up))
    expected = reference(g64, u64, approximate)
    assert y.shape == gate.shape and y.dtype == dtype
    assert_close(y, expected, dtype)
    dy = random(shape, dtype, device, seed=3)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(gate.grad, g64.grad, dtype)
    assert_close(up.grad, u64.grad, dtype)


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_tails(approximate, dtype, device):
    """Far from 0 the erf form's 1 + erf(g / sqrt(2)) cancels; the library's
    erfc keeps the digits, and both forms stay finite."""
    gate = torch.linspace(-30, 30, 2401, dtype=torch.float64).to(dtype).to(device).requires_grad_()
    up = torch.ones_like(gate).requires_grad_()
    y = fo.fused_geglu(gate, up, approximate=approximate)
    g64 = gate.detach().double().requires_grad_()
    expected = F.gelu(g64, approximate=approximate)
    assert_close(y, expected, dtype)
    y.sum().backward()
    expected.sum().backward()
    assert torch.isfinite(gate.grad).all()
    assert_close(gate.grad, g64.grad, dtype)


def test_default_is_tanh(device):
    gate, up = random((4, 9), torch.float64, device, seed=4), random((4, 9), torch.float64, device, seed=5)
    assert torch.equal(fo.fused_geglu(gate, up), fo.fused_geglu(gate, up, approximate="tanh"))
    assert_close(fo.fused_geglu(gate, up), reference(gate, up, "tanh"), torch.float64)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
def test_strided_inputs_and_odd_gradients(offset, device):
    wide = random((12, 80), torch.bfloat16, device, seed=4)
    gate = wide[:, offset : offset + 64].requires_grad_()
    up = random((64, 12), torch.bfloat16, device, seed=5).t().requires_grad_()
    y = fo.fused_geglu(gate, up, approximate="none")
    expected = reference(gate.detach().double(), up.detach().double(), "none")
    assert_close(y, expected, torch.bfloat16)
    y.sum().backward()  # a stride-0 gradient
    assert_close(up.grad, F.gelu(gate.detach().double()), torch.bfloat16)


def test_prepared_backward_matches_the_general_one(device):
    """Forward prepares backward's call for a dense dy; a strided one (the
    same values, column-major) takes the general path: the same bits, and
    both match float64."""
    gate = random((6, 40), torch.bfloat16, device, seed=8).requires_grad_()
    up = random((6, 40), torch.bfloat16, device, seed=9).requires_grad_()
    dy = random((6, 40), torch.bfloat16, device, seed=10)
    strided = dy.t().contiguous().t()
    assert not strided.is_contiguous()
    dense_grads = torch.autograd.grad(fo.fused_geglu(gate, up), (gate, up), dy)
    strided_grads = torch.autograd.grad(fo.fused_geglu(gate, up), (gate, up), strided)
    g64, u64 = (t.detach().double().requires_grad_() for t in (gate, up))
    expected = torch.autograd.grad(reference(g64, u64, "tanh"), (g64, u64), dy.double())
    for dense, general, want in zip(dense_grads, strided_grads, expected):
        assert torch.equal(dense, general)
        assert_close(dense, want, torch.bfloat16)


def test_gate_up_halves_of_one_projection(device):
    """Phi-3's gate_up_proj(x).chunk(2, dim=-1): strided rows, no copy needed."""
    fused = random((3, 5, 2 * 48), torch.float32, device, seed=6).requires_grad_()
    gate, up = fused.chunk(2, dim=-1)
    y = fo.fused_geglu(gate, up)
    f64 = fused.detach().double().requires_grad_()
    expected = reference(*f64.chunk(2, dim=-1), "tanh")
    assert_close(y, expected, torch.float32)
    dy = random(y.shape, torch.float32, device, seed=7)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(fused.grad, f64.grad, torch.float32)


def test_gradient_only_where_wanted(device):
    gate = random((4, 8), torch.float32, device, seed=6)
    up = random((4, 8), torch.float32, device, seed=7).requires_grad_()
    fo.fused_geglu(gate, up, approximate="none").sum().backward()
    assert gate.grad is None
    assert_close(up.grad, F.gelu(gate.double()), torch.float32)


@pytest.mark.parametrize("approximate", APPROXIMATIONS)
def test_gradcheck_float64(approximate, device):
    gate = random((3, 9), torch.float64, device, seed=8).requires_grad_()
    up = random((3, 9), torch.float64, device, seed=9).requires_grad_()
    assert torch.autograd.gradcheck(lambda g, u: fo.fused_geglu(g, u, approximate), (gate, up))


def test_no_grad_saves_nothing(device):
    gate = random((4, 8), torch.float32, device, seed=10).requires_grad_()
    up = random((4, 8), torch.float32, device, seed=11)
    with torch.no_grad():
        y = fo.fused_geglu(gate, up)
    assert y.grad_fn is None and not y.requires_grad


@pytest.mark.parametrize(
    "call, exception, words",
    [
        (lambda: fo.fused_geglu(torch.ones(3, 4), torch.ones(3, 5)), ValueError, ["fused_geglu", "(3, 5)", "(3, 4)"]),
        (lambda: fo.fused_geglu(torch.ones(3), torch.ones(3).double()), TypeError, ["up", "torch.float64"]),
        (lambda: fo.fused_geglu(torch.ones(3, dtype=torch.int32), torch.ones(3)), TypeError, ["gate", "int32"]),
        (lambda: fo.fused_geglu(torch.ones(3), [1.0]), TypeError, ["up", "list"]),
        (
            lambda: fo.fused_geglu(torch.ones(3), torch.ones(3), approximate="erf"),
            ValueError,
            ["fused_geglu", "approximate='erf'", "'tanh' or 'none'"],
        ),
        (lambda: fo.fused_geglu(torch.ones(3), torch.ones(3), approximate=None), ValueError, ["approximate=None"]),
    ],
)
def test_bad_input(call, exception, words):
    with pytest.raises(exception) as info:
        call()
    for word in words:
        assert word in str(info.value)


@requires_gpu()
@pytest.mark.parametrize("approximate", APPROXIMATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(129, 520), (96, 1024)], ids=str)  # (96, 1024): spread
def test_gpu_matches_cpu_kernels(shape, dtype, approximate):
    gate, up = (random(shape, dtype, "cpu", seed=s).requires_grad_() for s in (12, 13))
    gate_gpu, up_gpu = (t.detach().cuda().requires_grad_() for t in (gate, up))
    y = fo.fused_geglu(gate, up, approximate)
    y_gpu = fo.fused_geglu(gate_gpu, up_gpu, approximate)
    assert_close(y_gpu, y.double(), dtype)
    y.backward(y)
    y_gpu.backward(y_gpu)
    assert_close(gate_gpu.grad, gate.grad.double(), dtype)
    assert_close(up_gpu.grad, up.grad.double(), dtype)
