"""square against torch in float64."""

import pytest
import torch
from conftest import SHAPES, assert_close, random

import fused_ops_py as fo


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_and_gradient(shape, dtype, device):
    x = random(shape, dtype, device, seed=1).requires_grad_()
    y = fo.square(x)
    x64 = x.detach().double().requires_grad_()
    expected = x64 * x64
    assert y.shape == x.shape and y.dtype == dtype
    assert_close(y, expected, dtype)
    dy = random(shape, dtype, device, seed=2)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(x.grad, x64.grad, dtype)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
def test_strided_input_and_gradient(offset, dtype, device):
    wide = random((16, 72), dtype, device, seed=3)
    x = wide[:, offset : offset + 64].requires_grad_()
    dy = random((64, 16), dtype, device, seed=4).t()  # non-contiguous
    y = fo.square(x)
    y.backward(dy)
    assert_close(y, x.detach().double() ** 2, dtype)
    assert_close(x.grad, 2 * x.detach().double() * dy.double(), dtype)


def test_expanded_gradient(device):
    x = random((5, 9), torch.float32, device, seed=5).requires_grad_()
    fo.square(x).sum().backward()
    assert_close(x.grad, 2 * x.detach().double(), torch.float32)


def test_overflow_nan_and_inf_follow_torch(device):
    x = torch.tensor([300.0, float("nan"), float("inf"), -float("inf"), 1e-4], device=device)
    for dtype in (torch.float16, torch.float32):
        value = x.to(dtype)
        torch.testing.assert_close(fo.square(value), value * value, equal_nan=True)


def test_gradcheck_float64(device):
    x = random((4, 7), torch.float64, device, seed=6).requires_grad_()
    assert torch.autograd.gradcheck(fo.square, (x,))
