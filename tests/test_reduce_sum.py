"""reduce_sum against torch in float64, and its determinism."""

import pytest
import torch
from conftest import SHAPES, random

import fused_ops_py as fo

# fp32 accumulation of n values of size ~1: error grows about like sqrt(n) ulps
SUM_TOLERANCES = {
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
    torch.float64: 1e-12,
}


@pytest.mark.parametrize("shape", SHAPES + [(1000003,), (3, 1 << 20)], ids=str)
def test_sum_and_gradient(shape, dtype, device):
    x = random(shape, dtype, device, seed=1).requires_grad_()
    total = fo.reduce_sum(x)
    assert total.shape == () and total.dtype == dtype
    expected = x.detach().double().sum()
    # relative to the sum of magnitudes, the scale rounding errors live on
    scale = max(1.0, x.detach().double().abs().sum().item() ** 0.5)
    tolerance = SUM_TOLERANCES[dtype]
    assert abs(total.item() - expected.item()) <= tolerance * (scale + abs(expected.item()))
    dy = torch.tensor(0.75, dtype=dtype, device=device)
    total.backward(dy)
    assert x.grad.shape == x.shape
    assert torch.equal(x.grad, torch.full(shape, 0.75, dtype=dtype, device=device))


@pytest.mark.parametrize("numel", [2047, 2048, 2049, 2056, 2057])
def test_one_block_and_two_passes_agree_with_float64(numel, dtype, device):
    # on CUDA, up to 256 chunks of 8 one block's sum is the result; past
    # them, blocks' partials are summed by a second kernel
    x = random((numel,), dtype, device, seed=5)
    expected = x.double().sum().item()
    scale = max(1.0, x.double().abs().sum().item() ** 0.5)
    assert abs(fo.reduce_sum(x).item() - expected) <= SUM_TOLERANCES[dtype] * (scale + abs(expected))


def test_empty_sums_to_zero(dtype, device):
    assert fo.reduce_sum(torch.empty((0, 5), dtype=dtype, device=device)).item() == 0.0


def test_non_contiguous_input(device):
    x = random((64, 48), torch.float32, device, seed=2).t()
    torch.testing.assert_close(fo.reduce_sum(x).double(), x.double().sum(), rtol=1e-5, atol=1e-4)


def test_same_bits_on_every_run(dtype, device):
    x = random((777, 1001), dtype, device, seed=3)
    first = fo.reduce_sum(x)
    assert all(torch.equal(first, fo.reduce_sum(x)) for _ in range(5))


def test_half_sum_accumulates_in_fp32(device):
    # 4096 ones then many small values: an fp16 accumulator would stall at
    # 4096 (spacing 4 there) and lose them all
    x = torch.cat([torch.ones(4096), torch.full((8192,), 0.5)]).half().to(device)
    assert fo.reduce_sum(x).item() == 8192.0


def test_gradcheck_float64(device):
    x = random((3, 5), torch.float64, device, seed=4).requires_grad_()
    assert torch.autograd.gradcheck(fo.reduce_sum, (x,))
