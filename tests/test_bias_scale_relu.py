"""fused_bias_scale_relu, relu and FusedBiasScaleReLU against torch in float64."""

import pytest
import torch
from conftest import SHAPES, TOLERANCES, assert_close, random

import fused_ops_py as fo

SCALES = [1.0, 0.5, -1.75]


def reference(x, bias, scale):
    """relu(x * scale + bias) and its gradients, in float64 by torch."""
    x64 = x.detach().double().requires_grad_()
    b64 = bias.detach().double().requires_grad_()
    return torch.relu(x64 * scale + b64), x64, b64


@pytest.mark.parametrize("shape", [s for s in SHAPES if len(s) >= 1], ids=str)
@pytest.mark.parametrize("scale", SCALES)
def test_forward_and_gradients(shape, scale, dtype, device):
    x = random(shape, dtype, device, seed=1).requires_grad_()
    bias = random(shape[-1:], dtype, device, seed=2).requires_grad_()
    y = fo.fused_bias_scale_relu(x, bias, scale)
    expected, x64, b64 = reference(x, bias, scale)
    assert y.shape == x.shape and y.dtype == dtype and y.device == device
    assert_close(y, expected, dtype)

    dy = random(shape, dtype, device, seed=3)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(x.grad, x64.grad, dtype)
    # the bias gradient sums over rows: allow the rounding of dy's dtype
    # accumulated over them
    rows = max(1, x.numel() // max(1, shape[-1]))
    tolerance = TOLERANCES[dtype]
    torch.testing.assert_close(
        bias.grad.cpu().double(),
        b64.grad.cpu(),
        atol=tolerance["atol"] * rows**0.5 * 4,
        rtol=tolerance["rtol"] * 2,
    )


@pytest.mark.parametrize("shape", [s for s in SHAPES], ids=str)
def test_relu(shape, dtype, device):
    x = random(shape, dtype, device, seed=4).requires_grad_()
    y = fo.relu(x)
    assert y.shape == x.shape
    x64 = x.detach().double().requires_grad_()
    expected = torch.relu(x64)
    assert_close(y, expected, dtype)
    dy = random(shape, dtype, device, seed=5)
    y.backward(dy)
    expected.backward(dy.double())
    assert_close(x.grad, x64.grad, dtype)


# (64, 1024): rows of whole 32-chunk groups, where the CUDA kernels spread a
# chunk's fp32/fp64 vectors over the warp and gather the mask bytes with
# shuffles; (3, 1000): side by side; (5, 13): element by element
@pytest.mark.parametrize("shape", [(64, 1024), (3, 1000), (5, 13)], ids=str)
def test_mask_byte_b_holds_columns_8b_to_8b_plus_7(shape, dtype, device):
    """The saved mask's layout, against the output itself: byte b of a row,
    bit i, says whether column 8b + i of y is not <= 0."""
    x = random(shape, dtype, device, seed=8)
    bias = random(shape[-1:], dtype, device, seed=9)
    y, mask = torch.ops.fused_ops_py.bias_scale_relu(x, bias, 0.5, True)
    rows, cols = shape
    flowing = torch.zeros(rows, mask.shape[1] * 8, dtype=torch.int64)
    flowing[:, :cols] = (~(y.cpu() <= 0)).long()
    weights = 2 ** torch.arange(8, dtype=torch.int64)
    expected = (flowing.view(rows, -1, 8) * weights).sum(-1).to(torch.uint8)
    assert torch.equal(mask.cpu(), expected)


@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
def test_fp32_bias_with_half_x(x_dtype, device):
    x = random((33, 24), x_dtype, device, seed=6).requires_grad_()
    bias = random((24,), torch.float32, device, seed=7).requires_grad_()
    y = fo.fused_bias_scale_relu(x, bias, 0.75)
    assert y.dtype == x_dtype
    expected, x64, b64 = reference(x, bias, 0.75)
    assert_close(y, expected, x_dtype)
    y.sum().backward()
    expected.sum().backward()
    assert bias.grad.dtype == torch.float32
    assert_close(x.grad, x64.grad, x_dtype)
    torch.testing.assert_close(bias.grad.cpu().double(), b64.grad.cpu(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("offset", [0, 3], ids=["aligned", "misaligned"])
def test_strided_rows_are_read_in_place(offset, dtype, device):
    wide = random((40, 80), dtype, device, seed=8)
    x = wide[:, offset : offset + 48]  # rows 80 elements apart
    bias = random((48,), dtype, device, seed=9)
    assert not x.is_contiguous()
    expected, _, _ = reference(x, bias, 1.5)
    assert_close(fo.fused_bias_scale_relu(x, bias, 1.5), expected, dtype)
    assert_close(fo.relu(x), torch.relu(x.double()), dtype)


def test_noncontiguous_and_expanded_gradients(dtype, device):
    x = random((24, 40), dtype, device, seed=10).requires_grad_()
    bias = random((40,), dtype, device, seed=11).requires_grad_()
    expected, x64, b64 = reference(x, bias, 2.0)
    # a transposed gradient: rows are not contiguous
    dy = random((40, 24), dtype, device, seed=12).t()
    fo.fused_bias_scale_relu(x, bias, 2.0).backward(dy)
    expected.backward(dy.double())
    assert_close(x.grad, x64.grad, dtype)
    torch.testing.assert_close(bias.grad.cpu().double(), b64.grad.cpu(), atol=0.2, rtol=2e-2)
    # sum().backward() hands over a stride-0 gradient
    x.grad = bias.grad = None
    fo.fused_bias_scale_relu(x, bias, 2.0).sum().backward()
    expected_dx = (x.detach().double() * 2.0 + bias.detach().double() > 0).double() * 2.0
    assert_close(x.grad, expected_dx, dtype)


def test_gradient_only_for_inputs_that_need_it(device):
    x = random((8, 16), torch.float32, device, seed=13)
    bias = random((16,), torch.float32, device, seed=14).requires_grad_()
    fo.fused_bias_scale_relu(x, bias).sum().backward()
    expected = (x.double() + bias.detach().double() > 0).double().sum(0)
    assert_close(bias.grad, expected, torch.float32)
    assert x.grad is None


def test_nan_and_inf_propagate_as_in_torch(device):
    x = torch.tensor([[float("nan"), float("inf"), -float("inf"), 1.0, -1.0, 0.0]], device=device)
    bias = torch.zeros(6, device=device)
    expected = torch.relu(x)
    torch.testing.assert_close(fo.fused_bias_scale_relu(x, bias), expected, equal_nan=True)
    torch.testing.assert_close(fo.relu(x), expected, equal_nan=True)


def test_bias_gradient_is_bitwise_deterministic(device):
    x = random((4099, 96), torch.float32, device, seed=15).requires_grad_()
    bias = random((96,), torch.float32, device, seed=16).requires_grad_()
    grads = []
    for _ in range(3):
        bias.grad = None
        fo.fused_bias_scale_relu(x, bias, 0.5).backward(torch.ones_like(x))
        grads.append(bias.grad.clone())
    assert all(torch.equal(grads[0], g) for g in grads[1:])


@pytest.mark.parametrize("scale", [1.0, -0.5])
def test_gradcheck_float64(scale, device):
    x = random((6, 11), torch.float64, device, seed=17).requires_grad_()
    bias = random((11,), torch.float64, device, seed=18).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: fo.fused_bias_scale_relu(a, b, scale), (x, bias))
    assert torch.autograd.gradcheck(fo.relu, (x,))


def test_module_matches_functional_and_owns_its_bias(device):
    module = fo.FusedBiasScaleReLU(12, scale=0.5).to(device)
    assert [name for name, _ in module.named_parameters()] == ["bias"]
    assert torch.equal(module.bias.detach().cpu(), torch.zeros(12))
    assert "features=12, scale=0.5" in repr(module)
    with torch.no_grad():
        module.bias.copy_(random((12,), torch.float32, device, seed=19))
    x = random((5, 12), torch.float32, device, seed=20)
    expected, _, b64 = reference(x, module.bias, 0.5)
    y = module(x)
    assert_close(y, expected, torch.float32)
    y.sum().backward()
    expected.sum().backward()
    assert_close(module.bias.grad, b64.grad, torch.float32)
    state = module.state_dict()
    assert list(state) == ["bias"]
    clone = fo.FusedBiasScaleReLU(12, scale=0.5)
    clone.load_state_dict(state)
    assert torch.equal(clone.bias.cpu(), module.bias.detach().cpu())


def test_no_grad_path_gives_the_same_values(device):
    x = random((9, 33), torch.bfloat16, device, seed=21).requires_grad_()
    bias = random((33,), torch.bfloat16, device, seed=22).requires_grad_()
    with_grad = fo.fused_bias_scale_relu(x, bias, 1.25)
    with torch.no_grad():
        without = fo.fused_bias_scale_relu(x, bias, 1.25)
    assert with_grad.requires_grad and not without.requires_grad
    assert torch.equal(with_grad.detach(), without)


def test_values_that_round_to_zero_pass_no_gradient(device):
    # 2^-24 * 0.5 is positive in fp32 but rounds to 0 in fp16 (and the
    # smallest fp32 halved rounds to 0 in fp32): y is 0, so is the gradient
    for dtype, tiny in ((torch.float16, 2.0**-24), (torch.float32, 1.4e-45)):
        x = torch.full((2, 8), tiny, dtype=dtype, device=device, requires_grad=True)
        y = fo.fused_bias_scale_relu(x, torch.zeros(8, dtype=dtype, device=device), 0.5)
        assert (y == 0).all()
        y.backward(torch.ones_like(y))
        assert (x.grad == 0).all()


def test_non_contiguous_bias_is_read_by_its_strides(device):
    x = random((5, 8), torch.float32, device, seed=30)
    wide = random((16,), torch.float32, device, seed=31)
    for bias in (wide[::2], torch.tensor([0.5], device=device).expand(8)):
        expected = torch.relu(x.double() * 1.5 + bias.double())
        assert_close(fo.fused_bias_scale_relu(x, bias, 1.5), expected, torch.float32)


def test_nan_passes_its_gradient_as_in_torch(device):
    x = torch.tensor([[float("nan"), 1.0, -1.0, 0.0]], device=device, requires_grad=True)
    fo.relu(x).sum().backward()
    reference = x.detach().clone().requires_grad_()
    torch.relu(reference).sum().backward()
    torch.testing.assert_close(x.grad, reference.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_relu_edges_and_their_gradients_as_in_torch(dtype, device):
    tiny = torch.finfo(dtype).smallest_normal / 4  # a subnormal
    values = [float("nan"), -float("nan"), float("inf"), -float("inf"), 1.0, -1.0, 0.0, -0.0, tiny, -tiny]
    x = torch.tensor([values * 3], dtype=dtype, device=device).requires_grad_()  # 30 columns: past a mask byte
    reference = x.detach().clone().requires_grad_()
    y, want = fo.relu(x), torch.relu(reference)
    torch.testing.assert_close(y, want, rtol=0, atol=0, equal_nan=True)
    assert not torch.signbit(y[~y.isnan()]).any()  # -0 is +0, as x + 0.0 gives
    dy = torch.arange(1.0, 31.0, dtype=dtype, device=device)[None]
    y.backward(dy)
    want.backward(dy)
    torch.testing.assert_close(x.grad, reference.grad, rtol=0, atol=0)
