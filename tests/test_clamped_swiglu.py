"""fused_clamped_swiglu (gpt-oss's experts' activation) against torch in
float64: both layouts, the clamps' edges, NaN, bad arguments."""

import math

import pytest
import torch
from conftest import assert_close, random

import fused_ops_py as fo
from fused_ops_py import _core

LAYOUTS = [True, False]
SHAPES = [(0, 8), (1, 2), (7, 26), (31, 514), (2, 3, 34), (64, 2048), (3, 70002)]


def reference(gate_up, alpha=1.702, limit=7.0, interleaved=True):
    """transformers' GptOssExperts._apply_gate (with the halves layout too)."""
    gate, up = (gate_up[..., ::2], gate_up[..., 1::2]) if interleaved else gate_up.chunk(2, dim=-1)
    gate = gate.clamp(min=None, max=limit)
    up = up.clamp(min=-limit, max=limit)
    glu = gate * torch.sigmoid(gate * alpha)
    return (up + 1) * glu


def spread(shape, dtype, device, seed):
    """Values of scale 6: many beyond limit=7 on either side."""
    return (random(shape, torch.float64, device, seed) * 6).to(dtype)


@pytest.mark.parametrize("interleaved", LAYOUTS, ids=["pairs", "halves"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_gradient(shape, interleaved, dtype, device):
    gate_up = spread(shape, dtype, device, seed=1).requires_grad_()
    y = fo.fused_clamped_swiglu(gate_up, interleaved=interleaved)
    x64 = gate_up.detach().double().requires_grad_()
    expected = reference(x64, interleaved=interleaved)
    assert y.shape == (*shape[:-1], shape[-1] // 2) and y.dtype == dtype
    assert_close(y, expected, dtype)
    dy = random(y.shape, dtype, device, seed=2)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(gate_up.grad, x64.grad, dtype)


@pytest.mark.parametrize("interleaved", LAYOUTS, ids=["pairs", "halves"])
def test_alpha_limit_and_the_clamps_edges(interleaved, device):
    """Values at and around +-limit (where torch.clamp's gradient at the
    bound depends on the torch version: the library asks the installed one),
    other alpha and limit, and limit=inf."""
    edges = torch.tensor([-3.5, -3.5 - 1e-6, -3.5 + 1e-6, 3.5, 3.5 - 1e-6, 3.5 + 1e-6, 0.0, -20.0, 20.0])
    grid = torch.cartesian_prod(edges, edges)  # every (gate, up) pair
    pairs = grid if interleaved else grid.t().contiguous()
    gate_up = pairs.reshape(-1 if interleaved else 1, 2 * grid.shape[0] if not interleaved else 2)
    for alpha, limit in ((1.702, 3.5), (0.5, 3.5), (-1.0, math.inf)):
        x = gate_up.to(device, copy=True).requires_grad_()
        y = fo.fused_clamped_swiglu(x, alpha=alpha, limit=limit, interleaved=interleaved)
        x64 = gate_up.double().requires_grad_()
        expected = reference(x64, alpha, limit, interleaved)
        assert_close(y, expected, torch.float32)
        y.backward(torch.ones_like(y))
        expected.backward(torch.ones_like(expected))
        assert_close(x.grad, x64.grad, torch.float32)


def test_nan_stays_nan(device):
    gate_up = torch.tensor([[math.nan, 1.0, 1.0, math.nan, 8.0, 2.0]], device=device)
    y = fo.fused_clamped_swiglu(gate_up).cpu()
    expected = reference(gate_up.double().cpu())
    assert torch.equal(y.isnan(), expected.isnan()) and y.isnan().sum() == 2
    assert_close(y[:, 2:], expected[:, 2:], torch.float32)


def test_strided_input_and_expanded_gradient(device):
    wide = spread((12, 90), torch.bfloat16, device, seed=4)
    gate_up = wide[:, 3:67].requires_grad_()  # rows of a wider tensor
    y = fo.fused_clamped_swiglu(gate_up)
    x64 = gate_up.detach().double().requires_grad_()
    expected = reference(x64)
    assert_close(y, expected, torch.bfloat16)
    y.sum().backward()  # a stride-0 gradient
    expected.sum().backward()
    assert_close(gate_up.grad, x64.grad, torch.bfloat16)


def test_no_grad_records_nothing(device):
    gate_up = spread((5, 40), torch.float32, device, seed=5).requires_grad_()
    with torch.no_grad():
        y = fo.fused_clamped_swiglu(gate_up)
    assert y.grad_fn is None
    assert_close(y, reference(gate_up.detach().double()), torch.float32)


@pytest.mark.skipif(not _core.AVAILABLE, reason="torch.compile support needs torch >= 2.4")
def test_compiles_to_one_graph(device):
    gate_up = spread((5, 40), torch.float32, device, seed=5)
    compiled = torch.compile(fo.fused_clamped_swiglu, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(gate_up), fo.fused_clamped_swiglu(gate_up))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(gate_up=torch.zeros(3, 5)), ValueError, r"gate_up has shape \(3, 5\); its last dimension must be even"),
        (dict(gate_up=torch.zeros(3, 4, dtype=torch.int32)), TypeError, "gate_up has dtype torch.int32"),
        (dict(gate_up=[1.0, 2.0]), TypeError, "gate_up must be a torch.Tensor, got list"),
        (dict(limit=0.0), ValueError, "limit=0.0 must be positive"),
        (dict(limit=math.nan), ValueError, "limit=nan must be positive"),
        (dict(alpha=math.inf), ValueError, "alpha=inf must be finite"),
        (dict(alpha="1"), TypeError, "alpha must be a float, got str"),
        (dict(interleaved=1), TypeError, "interleaved must be a bool, got int"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, error, message):
    arguments = dict(gate_up=torch.zeros(3, 4), alpha=1.702, limit=7.0, interleaved=True) | kwargs
    with pytest.raises(error, match=f"fused_clamped_swiglu: {message}"):
        fo.fused_clamped_swiglu(**arguments)
