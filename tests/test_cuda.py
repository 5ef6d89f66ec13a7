"""CUDA-only behaviour: streams, a GPU other than the current one, 64-bit
indexing, and the CPU and GPU kernels agreeing. Skipped without a GPU."""

import pytest
import torch
from conftest import assert_close, random, requires_gpu

import fused_ops_py as fo


@requires_gpu()
def test_work_goes_to_the_current_stream():
    # The input is written on a side stream after a long sleep; if an op ran
    # on any other stream it would read the input before it was written.
    source = random((512, 1024), torch.float32, "cuda", seed=1)
    bias = random((1024,), torch.float32, "cuda", seed=2)
    x = torch.full_like(source, -1.0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)
        x.copy_(source)
        y = fo.fused_bias_scale_relu(x, bias, 0.5)
        total = fo.reduce_sum(fo.square(x))
    side.synchronize()
    assert_close(y, torch.relu(source.double() * 0.5 + bias.double()), torch.float32)
    torch.testing.assert_close(total.double(), (source.double() ** 2).sum(), rtol=1e-5, atol=1e-3)


@requires_gpu(2)
def test_tensors_on_a_gpu_other_than_the_current_one():
    torch.cuda.set_device(0)
    x = random((64, 96), torch.bfloat16, "cuda:1", seed=3).requires_grad_()
    bias = random((96,), torch.bfloat16, "cuda:1", seed=4).requires_grad_()
    y = fo.fused_bias_scale_relu(x, bias, 2.0)
    y.sum().backward()
    assert y.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    expected = torch.relu(x.detach().double() * 2 + bias.detach().double())
    assert_close(y, expected, torch.bfloat16)
    assert_close(x.grad, (expected > 0).double() * 2, torch.bfloat16)


@requires_gpu()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(129, 520), (96, 1024)], ids=str)  # (96, 1024): spread
def test_gpu_matches_cpu_kernels(shape, dtype):
    x = random(shape, dtype, "cpu", seed=5).requires_grad_()
    bias = random(shape[-1:], dtype, "cpu", seed=6).requires_grad_()
    x_gpu = x.detach().cuda().requires_grad_()
    bias_gpu = bias.detach().cuda().requires_grad_()
    y = fo.fused_bias_scale_relu(x, bias, 0.25)
    y_gpu = fo.fused_bias_scale_relu(x_gpu, bias_gpu, 0.25)
    torch.testing.assert_close(y_gpu.cpu(), y)
    y.backward(y)
    y_gpu.backward(y_gpu)
    torch.testing.assert_close(x_gpu.grad.cpu(), x.grad)
    torch.testing.assert_close(bias_gpu.grad.cpu(), bias.grad, rtol=1e-4, atol=1e-4)


@requires_gpu()
def test_more_than_2_to_the_31_elements():
    free, _ = torch.cuda.mem_get_info()
    numel = (1 << 31) + 24
    if free < 4 * numel * 2 + (1 << 30):
        pytest.skip("not enough GPU memory")
    x = torch.empty(numel, dtype=torch.bfloat16, device="cuda").fill_(-1.0)
    x[-24:] = torch.arange(24, dtype=torch.bfloat16, device="cuda") - 12
    y = fo.relu(x)
    assert torch.equal(y[-24:].cpu(), torch.relu(x[-24:].cpu()))
    assert y[: 1 << 20].eq(0).all()
    del y
    total = fo.reduce_sum(x[(1 << 31) - 8 :])
    assert total.item() == (-8 + (torch.arange(24) - 12).sum()).item()
    x = x.view(-1, 8)
    y = fo.square(x)
    assert torch.equal(y[-3:].cpu(), (x[-3:].float() ** 2).bfloat16().cpu())


@requires_gpu()
def test_norm_over_more_than_2_to_the_31_elements():
    cols = 4096
    rows = (1 << 31) // cols + 3
    free, _ = torch.cuda.mem_get_info()
    if free < 3 * rows * cols * 2 + (1 << 30):
        pytest.skip("not enough GPU memory")
    x = torch.randn(rows, cols, dtype=torch.bfloat16, device="cuda")
    weight = torch.randn(cols, dtype=torch.float32, device="cuda")
    y = fo.fused_rms_norm(x, weight)
    tail = x[-5:].double()
    expected = (
        tail * torch.rsqrt(tail.pow(2).mean(-1, keepdim=True) + torch.finfo(torch.bfloat16).eps) * weight.double()
    )
    assert_close(y[-5:], expected, torch.bfloat16)
    del y
    residual = torch.zeros_like(x)
    out, h = fo.fused_add_layer_norm(x, residual)
    assert torch.equal(h[-5:], x[-5:])
    assert_close(out[-5:], torch.nn.functional.layer_norm(tail, (cols,)), torch.bfloat16)
