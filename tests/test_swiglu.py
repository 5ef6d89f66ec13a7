"""fused_swiglu against torch in float64 (the op docs/adding-an-op.md adds)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import SHAPES, assert_close, random

import fused_ops_py as fo
from fused_ops_py.ops.swiglu import swiglu_over_inputs


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_gradients(shape, dtype, device):
    gate = random(shape, dtype, device, seed=1).requires_grad_()
    up = random(shape, dtype, device, seed=2).requires_grad_()
    y = fo.fused_swiglu(gate, up)
    g64, u64 = (t.detach().double().requires_grad_() for t in (gate, up))
    expected = F.silu(g64) * u64
    assert y.shape == gate.shape and y.dtype == dtype
    assert_close(y, expected, dtype)
    dy = random(shape, dtype, device, seed=3)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(gate.grad, g64.grad, dtype)
    assert_close(up.grad, u64.grad, dtype)


def one_rounding(actual, exact, dtype):
    """actual within one ulp of the exact float64 values (as the fuzz harness holds them)."""
    ulp = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}[dtype]
    tiniest = {torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24}[dtype]
    actual, exact = actual.double(), exact.double()
    finite = exact.abs() <= torch.finfo(dtype).max
    bad = finite & ((actual - exact).abs() > ulp * exact.abs() + tiniest)
    assert not bad.any(), (actual[bad][:5], exact[bad][:5])
    assert torch.equal(actual[~finite].isinf(), ~exact[~finite].isnan() & ~finite[~finite])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_extremes_round_once(dtype, device):
    # the 16-bit CPU path computes in float: gates whose sigmoid float cannot hold (below -87),
    # dy * up past float's range with a small silu'(g), and tiny up * large dy, each within one
    # rounding of float64's result (the CUDA kernel rounds its float terms as torch's does)
    if device.type != "cpu":
        pytest.skip("the CPU kernels' one-rounding bound")
    big = 1e30 if dtype == torch.bfloat16 else 200.0
    gate = torch.tensor([-200.0, -88.0, -87.0, -86.5, -80.0, -30.0, -1.2785, 0.0, 3.0, 90.0] * 4)
    up = torch.cat([torch.full((10,), big), torch.full((10,), -big), torch.full((10,), 1e-8), torch.ones(10)])
    dy = torch.cat([torch.full((10,), big), torch.full((10,), big), torch.full((10,), big), torch.ones(10)])
    gate, up, dy = (t.to(dtype).reshape(4, 10).to(device) for t in (gate, up, dy))
    g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
    y = fo.fused_swiglu(g, u)
    y.backward(dy)
    g64, u64 = gate.double().requires_grad_(), up.double().requires_grad_()
    expected = F.silu(g64) * u64
    expected.backward(dy.double())
    one_rounding(y, expected, dtype)
    one_rounding(g.grad, g64.grad, dtype)
    one_rounding(u.grad, u64.grad, dtype)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
def test_strided_inputs_and_odd_gradients(offset, device):
    wide = random((12, 80), torch.bfloat16, device, seed=4)
    gate = wide[:, offset : offset + 64].requires_grad_()
    up = random((64, 12), torch.bfloat16, device, seed=5).t().requires_grad_()
    y = fo.fused_swiglu(gate, up)
    expected = F.silu(gate.detach().double()) * up.detach().double()
    assert_close(y, expected, torch.bfloat16)
    y.sum().backward()  # a stride-0 gradient
    s = torch.sigmoid(gate.detach().double())
    assert_close(up.grad, gate.detach().double() * s, torch.bfloat16)


def test_gradient_only_where_wanted(device):
    gate = random((4, 8), torch.float32, device, seed=6)
    up = random((4, 8), torch.float32, device, seed=7).requires_grad_()
    fo.fused_swiglu(gate, up).sum().backward()
    assert gate.grad is None
    assert_close(up.grad, F.silu(gate.double()), torch.float32)


def test_gradcheck_float64(device):
    gate = random((3, 9), torch.float64, device, seed=8).requires_grad_()
    up = random((3, 9), torch.float64, device, seed=9).requires_grad_()
    assert torch.autograd.gradcheck(fo.fused_swiglu, (gate, up))


@pytest.mark.parametrize(
    "call, exception, words",
    [
        (lambda: fo.fused_swiglu(torch.ones(3, 4), torch.ones(3, 5)), ValueError, ["fused_swiglu", "(3, 5)", "(3, 4)"]),
        (lambda: fo.fused_swiglu(torch.ones(3), torch.ones(3).double()), TypeError, ["up", "torch.float64"]),
        (lambda: fo.fused_swiglu(torch.ones(3, dtype=torch.int32), torch.ones(3)), TypeError, ["gate", "int32"]),
        (lambda: fo.fused_swiglu(torch.ones(3), [1.0]), TypeError, ["up", "list"]),
    ],
)
def test_bad_input(call, exception, words):
    with pytest.raises(exception) as info:
        call()
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("wanted", ["both", "gate", "up"])
def test_gradients_written_over_the_inputs_match(wanted, dtype, device):
    """swiglu_over_inputs (patch's MLPs): the gradients of fused_swiglu,
    written over the temporaries gate and up (no new memory)."""
    x = random((6, 48), dtype, device, seed=6).requires_grad_()
    dy = random((6, 48), dtype, device, seed=7)
    grads = []
    for swiglu in (fo.fused_swiglu, swiglu_over_inputs):
        x.grad = None
        gate, up = 2 * x, x - 1  # temporaries, as a projection's outputs
        if wanted == "gate":
            up = up.detach()
        if wanted == "up":
            gate = gate.detach()
        swiglu(gate, up).backward(dy)
        grads.append(x.grad.clone())
    assert torch.equal(grads[0], grads[1])
    g64 = (2 * x).detach().double().requires_grad_()
    u64 = (x - 1).detach().double().requires_grad_()
    (F.silu(g64) * u64).backward(dy.double())
    expected = {"both": 2 * g64.grad + u64.grad, "gate": 2 * g64.grad, "up": u64.grad}[wanted]
    assert_close(grads[1], expected, dtype)
