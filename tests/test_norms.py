"""LayerNorm, RMSNorm and their fused residual-add/dropout variants against
torch in float64; modules against torch's modules."""

import pytest
import torch
import torch.nn.functional as F
from conftest import TOLERANCES, assert_close, random

import fused_ops_py as fo
from fused_ops_py.ops import norm_calls as norm_module

# (x shape, normalized_shape): empty, one row, N=1, odd and prime N, N above
# 65536, 3-d input, a multi-dimensional normalized_shape, vector-path sizes
CASES = [
    ((0, 8), (8,)),
    ((1, 1), (1,)),
    ((5, 1), (1,)),
    ((1, 7), (7,)),
    ((3, 13), (13,)),
    ((17, 257), (257,)),
    ((2, 70001), (70001,)),
    ((2, 262147), (262147,)),
    ((2, 3, 40), (40,)),
    ((4, 6, 10), (6, 10)),
    ((64, 1024), (1024,)),
    # the register kernels (aligned, N % 8 == 0) at each chunks-a-thread
    # count, and a persistent backward grid whose blocks loop over rows
    ((4100, 64), (64,)),
    ((70, 512), (512,)),
    ((9, 264), (264,)),  # the last chunks of a thread past the row
    ((1100, 1024), (1024,)),  # 16-bit backward: 2 chunks, prefetching, blocks loop
    ((33, 4096), (4096,)),
    # the partials parked in held dx rows (CUDA): 8 rows a block of short
    # rows, each block's last iteration held; blocks of unequal row counts
    ((4096, 64), (64,)),
    ((2000, 512), (512,)),
    ((9, 8192), (8192,)),
    ((3, 16384), (16384,)),
    # the shared-memory backward: blocks that loop over rows, each copying
    # in the next; a row that leaves some threads' chunks empty
    ((140, 16384), (16384,)),
    ((5, 9000), (9000,)),
    ((3, 32768), (32768,)),  # backward: a cluster of 2 blocks a row
    ((2, 40008), (40008,)),  # a row split unevenly over a cluster of 4; fp64 streams
    ((40, 65536), (65536,)),  # clusters of 4 that loop over rows
    ((17, 131072), (131072,)),  # clusters of 8
]
IDS = [f"{shape}-{ns}" for shape, ns in CASES]


def rms_norm_reference(x, normalized_shape, weight, eps):
    dims = tuple(range(-len(normalized_shape), 0))
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


def leaf(shape, dtype, device, seed, grad=True):
    return random(shape, dtype, device, seed=seed).requires_grad_(grad)


def as64(t):
    return None if t is None else t.detach().double().requires_grad_()


def reduced_tolerance(dtype, rows):
    """Sums over rows (weight and bias gradients) grow like sqrt(rows)."""
    tolerance = TOLERANCES[dtype]
    return dict(atol=tolerance["atol"] * 4 * max(1, rows) ** 0.5, rtol=tolerance["rtol"] * 4)


def check_grads(pairs, dtype, rows):
    for actual, expected, reduced in pairs:
        if reduced:
            torch.testing.assert_close(actual.cpu().double(), expected.cpu(), **reduced_tolerance(dtype, rows))
        else:
            assert_close(actual, expected, dtype)


@pytest.mark.parametrize("affine", ["weight+bias", "weight", "bias", "none"])
@pytest.mark.parametrize("shape, normalized_shape", CASES, ids=IDS)
def test_layer_norm(shape, normalized_shape, affine, dtype, device):
    x = leaf(shape, dtype, device, 1)
    weight = leaf(normalized_shape, dtype, device, 2) if affine.startswith("weight") else None
    bias = leaf(normalized_shape, dtype, device, 3) if affine.endswith("bias") else None
    y = fo.fused_layer_norm(x, weight, bias, eps=1e-5, normalized_shape=normalized_shape)
    x64, w64, b64 = as64(x), as64(weight), as64(bias)
    expected = F.layer_norm(x64, normalized_shape, w64, b64, 1e-5)
    assert y.shape == x.shape and y.dtype == dtype
    assert_close(y, expected, dtype)
    dy = random(shape, dtype, device, seed=4)
    y.backward(dy)
    expected.backward(dy.double())
    rows = max(1, x.numel() // max(1, weight.numel() if weight is not None else shape[-1]))
    pairs = [(x.grad, x64.grad, False)]
    if weight is not None:
        pairs.append((weight.grad, w64.grad, True))
    if bias is not None:
        pairs.append((bias.grad, b64.grad, True))
    check_grads(pairs, dtype, rows * 8)


@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("shape, normalized_shape", CASES, ids=IDS)
def test_rms_norm(shape, normalized_shape, eps, dtype, device):
    x = leaf(shape, dtype, device, 5)
    weight = leaf(normalized_shape, dtype, device, 6)
    y = fo.fused_rms_norm(x, weight, eps=eps, normalized_shape=normalized_shape)
    x64, w64 = as64(x), as64(weight)
    expected = rms_norm_reference(x64, normalized_shape, w64, eps if eps is not None else torch.finfo(dtype).eps)
    assert_close(y, expected, dtype)
    dy = random(shape, dtype, device, seed=7)
    y.backward(dy)
    expected.backward(dy.double())
    check_grads([(x.grad, x64.grad, False), (weight.grad, w64.grad, True)], dtype, x.numel() + 1)


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("residual_dtype", ["same", "float32"])
@pytest.mark.parametrize(
    "shape",
    # (2, 40008) and (3, 131072): fp32 add + RMSNorm rows held by clusters of 4 and 8 blocks
    [(1, 1), (7, 13), (3, 5, 64), (37, 2048), (64, 2048), (2, 70001), (2, 40008), (3, 131072), (137, 9000), (0, 16)],
    ids=str,
)
def test_add_norm_without_dropout(shape, kind, residual_dtype, dtype, device):
    if residual_dtype == "float32" and dtype not in (torch.float16, torch.bfloat16):
        pytest.skip("an fp32 residual stream is for half-precision x")
    r_dtype = torch.float32 if residual_dtype == "float32" else dtype
    x = leaf(shape, dtype, device, 8)
    residual = leaf(shape, r_dtype, device, 9)
    weight = leaf(shape[-1:], dtype, device, 10)
    bias = leaf(shape[-1:], dtype, device, 11) if kind == "layer" else None
    if kind == "layer":
        y, residual_out = fo.fused_add_layer_norm(x, residual, weight, bias)
    else:
        y, residual_out = fo.fused_add_rms_norm(x, residual, weight)
    x64, r64, w64, b64 = as64(x), as64(residual), as64(weight), as64(bias)
    h64 = x64 + r64
    if kind == "layer":
        expected = F.layer_norm(h64, shape[-1:], w64, b64, 1e-5)
    else:
        expected = rms_norm_reference(h64, shape[-1:], w64, torch.finfo(dtype).eps)
    assert y.dtype == dtype and residual_out.dtype == r_dtype
    assert_close(residual_out, h64, r_dtype)
    assert_close(y, expected, dtype)
    # both outputs carry gradient, as in a pre-norm block
    dy = random(shape, dtype, device, seed=12)
    dresidual = random(shape, r_dtype, device, seed=13)
    torch.autograd.backward([y, residual_out], [dy, dresidual])
    torch.autograd.backward([expected, h64], [dy.double(), dresidual.double()])
    rows = max(1, x.numel() // shape[-1]) if shape[-1] else 1
    pairs = [(x.grad, x64.grad, False), (residual.grad, r64.grad, False), (weight.grad, w64.grad, True)]
    if bias is not None:
        pairs.append((bias.grad, b64.grad, True))
    check_grads(pairs, dtype, rows)
    assert residual.grad.dtype == r_dtype and x.grad.dtype == dtype


# fp32 weights beside 16-bit x: one chunk a thread in registers; then 4 on
# 512 threads (one instantiation), with the last ones past the row and
# filling a row of 16384
@pytest.mark.parametrize("rows, cols", [(9, 48), (5, 9000), (3, 16384)])
def test_mixed_fp32_params_with_half_x(rows, cols, device):
    for dtype in (torch.float16, torch.bfloat16):
        x = leaf((rows, cols), dtype, device, 14)
        weight = leaf((cols,), torch.float32, device, 15)
        bias = leaf((cols,), torch.float32, device, 16)
        y = fo.fused_layer_norm(x, weight, bias)
        x64, w64, b64 = as64(x), as64(weight), as64(bias)
        expected = F.layer_norm(x64, (cols,), w64, b64)
        assert y.dtype == dtype
        assert_close(y, expected, dtype)
        y.sum().backward()
        expected.sum().backward()
        assert weight.grad.dtype == torch.float32
        assert_close(x.grad, x64.grad, dtype)
        torch.testing.assert_close(weight.grad.double().cpu(), w64.grad.cpu(), atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(bias.grad.double().cpu(), b64.grad.cpu(), atol=1e-4, rtol=1e-4)


# an RMSNorm row held by a cluster of 4 blocks, fp32 weights beside 16-bit x
def test_mixed_fp32_weight_rms_norm_of_long_rows(device):
    for dtype in (torch.float16, torch.bfloat16):
        x = leaf((3, 65536), dtype, device, 14)
        weight = leaf((65536,), torch.float32, device, 15)
        y = fo.fused_rms_norm(x, weight)
        expected = rms_norm_reference(as64(x), (65536,), as64(weight), torch.finfo(dtype).eps)
        assert y.dtype == dtype
        assert_close(y, expected, dtype)


# the shared-memory forward with more rows than it has groups (a block or
# a cluster an SM), so each loops, copying in its next row: the weight and
# bias held in shared memory beside the block's slice of the row, 16-bit or
# fp32 beside 16-bit x; a row split unevenly across a cluster (40008)
@pytest.mark.parametrize("shape", [(300, 32768), (140, 40008), (150, 65536), (70, 131072)], ids=str)
@pytest.mark.parametrize("param_dtype", ["same", "float32"])
@pytest.mark.parametrize("affine", ["layer weight+bias", "layer bias", "rms weight"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_forward_of_long_rows_over_many_rows(affine, param_dtype, shape, dtype, device):
    if device.type != "cuda":
        pytest.skip("the CUDA kernels' row loops; the CPU's rows are covered above")
    if param_dtype == "float32" and dtype == torch.float32:
        pytest.skip("fp32 x has fp32 parameters already")
    p_dtype = torch.float32 if param_dtype == "float32" else dtype
    cols = shape[-1]
    x = random(shape, dtype, device, seed=40)
    weight = random((cols,), p_dtype, device, seed=41) if "weight" in affine else None
    bias = random((cols,), p_dtype, device, seed=42) if "bias" in affine else None
    if affine.startswith("layer"):
        y = fo.fused_layer_norm(x, weight, bias)
        expected = F.layer_norm(x.double(), (cols,), as64(weight), as64(bias))
    else:
        y = fo.fused_rms_norm(x, weight)
        expected = rms_norm_reference(x.double(), (cols,), as64(weight), torch.finfo(dtype).eps)
    assert y.dtype == dtype
    assert_close(y, expected, dtype)


@pytest.mark.parametrize("offset", [0, 3], ids=["aligned", "misaligned"])
def test_strided_rows_and_odd_gradients(offset, dtype, device):
    wide = random((12, 80), dtype, device, seed=17)
    x = wide[:, offset : offset + 64].requires_grad_()
    residual_wide = random((12, 96), dtype, device, seed=18)
    residual = residual_wide[:, offset : offset + 64].requires_grad_()
    weight = leaf((64,), dtype, device, 19)
    bias = leaf((64,), dtype, device, 20)
    y, h = fo.fused_add_layer_norm(x, residual, weight, bias)
    x64, r64, w64, b64 = as64(x), as64(residual), as64(weight), as64(bias)
    expected = F.layer_norm(x64 + r64, (64,), w64, b64)
    assert_close(y, expected, dtype)
    # a transposed gradient for y, none for h
    dy = random((64, 12), dtype, device, seed=21).t()
    y.backward(dy)
    expected.backward(dy.double())
    check_grads(
        [
            (x.grad, x64.grad, False),
            (residual.grad, r64.grad, False),
            (weight.grad, w64.grad, True),
            (bias.grad, b64.grad, True),
        ],
        dtype,
        12,
    )
    # sum().backward(): a stride-0 gradient
    z = as64(x)
    fo.fused_rms_norm(x.detach().requires_grad_(), weight).sum().backward()
    rms_norm_reference(z, (64,), w64.detach(), torch.finfo(dtype).eps).sum().backward()


def test_expanded_gradient(dtype, device):
    x = leaf((6, 24), dtype, device, 22)
    weight = leaf((24,), dtype, device, 23)
    fo.fused_rms_norm(x, weight).sum().backward()
    x64, w64 = as64(x), as64(weight)
    rms_norm_reference(x64, (24,), w64, torch.finfo(dtype).eps).sum().backward()
    check_grads([(x.grad, x64.grad, False), (weight.grad, w64.grad, True)], dtype, 6)


@pytest.mark.parametrize("op", ["layer_norm", "add_rms_norm"])
def test_prepared_backward_matches_the_general_one(op, dtype, device):
    """Forward prepares backward's call for dense gradients; strided ones
    (here the same values through a transposed view) take the general
    path. Both give the same bits, and each matches float64."""
    x, residual = leaf((6, 40), dtype, device, 30), leaf((6, 40), dtype, device, 31)
    weight, bias = leaf((40,), dtype, device, 32), leaf((40,), dtype, device, 33)
    dy = random((6, 40), dtype, device, seed=34)
    strided = dy.t().contiguous().t()  # dy's values, column-major
    assert not strided.is_contiguous()
    inputs = (x, residual, weight) if op == "add_rms_norm" else (x, weight, bias)

    def run(*tensors):
        if op == "add_rms_norm":
            return fo.fused_add_rms_norm(*tensors)[0]
        return fo.fused_layer_norm(*tensors)

    dense_grads = torch.autograd.grad(run(*inputs), inputs, dy)
    strided_grads = torch.autograd.grad(run(*inputs), inputs, strided)
    for dense, general in zip(dense_grads, strided_grads):
        assert torch.equal(dense, general)
    inputs64 = [as64(t) for t in inputs]
    if op == "add_rms_norm":
        h = inputs64[0] + inputs64[1]
        expected = rms_norm_reference(h, (40,), inputs64[2], torch.finfo(dtype).eps)
    else:
        expected = F.layer_norm(inputs64[0], (40,), inputs64[1], inputs64[2], 1e-5)
    expected_grads = torch.autograd.grad(expected, inputs64, dy.double())
    check_grads(
        [
            (a, e, i == 2 or (op == "layer_norm" and i == 1))
            for i, (a, e) in enumerate(zip(dense_grads, expected_grads))
        ],
        dtype,
        6,
    )


def test_more_rows_than_a_grid_holds(device):
    # 70000 rows of 4: more rows than one launch's blocks (a grid-stride loop)
    x = leaf((70000, 4), torch.float32, device, 24)
    weight = leaf((4,), torch.float32, device, 25)
    y = fo.fused_layer_norm(x, weight)
    expected = F.layer_norm(as64(x), (4,), weight.detach().double())
    assert_close(y, expected, torch.float32)
    # and aligned rows of 8 (the GPU's vector kernels: 8 rows a block, so
    # 600000 rows need more than the 65535 blocks of one launch)
    x = leaf((600000, 8), torch.float32, device, 26, grad=False)
    expected = F.layer_norm(x.double(), (8,))
    assert_close(fo.fused_layer_norm(x), expected, torch.float32)


# dropout ------------------------------------------------------------------


def dropout_block(device, p, shape=(64, 1000), seed=None):
    x = torch.ones(shape, device=device, requires_grad=True)
    residual = torch.zeros(shape, device=device, requires_grad=True)
    if seed is not None:
        torch.manual_seed(seed)
    y, h = fo.fused_add_layer_norm(x, residual, dropout_p=p)
    return x, residual, y, h


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_the_right_fraction_scaled(p, device):
    _, _, _, h = dropout_block(device, p, shape=(256, 1000))
    kept = h != 0
    fraction = kept.double().mean().item()
    n = h.numel()
    assert abs(fraction - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5
    torch.testing.assert_close(h[kept], torch.full_like(h[kept], 1 / (1 - p)))


def test_dropout_is_reproducible_and_fresh(device):
    first = dropout_block(device, 0.5, seed=123)[3]
    again = dropout_block(device, 0.5, seed=123)[3]
    following = dropout_block(device, 0.5)[3]
    assert torch.equal(first, again)
    assert not torch.equal(first, following)


# backward kernels: registers, shared memory, a cluster, streaming (unaligned)
@pytest.mark.parametrize("shape", [(32, 200), (16, 2048), (136, 12000), (2, 40008), (2, 40001)], ids=str)
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_dropout_gradient_flows_through_kept_elements_only(kind, shape, device):
    p = 0.4
    x = leaf(shape, torch.float32, device, 26)
    residual = leaf(shape, torch.float32, device, 27)
    weight = leaf(shape[-1:], torch.float32, device, 28)
    if kind == "layer":
        y, h = fo.fused_add_layer_norm(x, residual, weight, dropout_p=p)
    else:
        y, h = fo.fused_add_rms_norm(x, residual, weight, dropout_p=p)
    kept = (h - residual).detach() != 0  # x is never exactly -0: kept <=> nonzero
    torch.testing.assert_close((h - residual)[kept], x[kept] / (1 - p))
    (y * random(shape, torch.float32, device, seed=29)).sum().backward()
    # dh reaches residual whole, and x through the same mask, scaled
    expected_dx = torch.where(kept, residual.grad / (1 - p), torch.zeros_like(x))
    torch.testing.assert_close(x.grad, expected_dx)
    assert (x.grad[~kept] == 0).all()


@pytest.mark.parametrize("cols", [1000, 2048, 16384], ids=str)
def test_dropout_mask_is_a_function_of_row_and_column(cols, device):
    """The same seed keeps the same elements whichever kernel runs: the
    register kernel (fp32 rows of whole 32-chunk groups spread a chunk's
    values over the warp; 1000 columns do not) and the streaming kernel
    that a misaligned view takes, element by element."""
    rows, p = 6, 0.5
    values = random((rows, cols + 1), torch.float32, device, seed=36)
    residual = random((rows, cols), torch.float32, device, seed=37)
    aligned = values[:, :cols].contiguous()
    misaligned = values.flatten()[1 : rows * cols + 1].view(rows, cols)  # 4 bytes off
    misaligned.copy_(aligned)
    outputs = []
    for x in (aligned, misaligned):
        torch.manual_seed(38)
        if device.type == "cuda":
            torch.cuda.manual_seed(38)
        outputs.append(fo.fused_add_rms_norm(x, residual, dropout_p=p))
    (y, h), (y_streamed, h_streamed) = outputs
    assert torch.equal(h, h_streamed)
    torch.testing.assert_close(y, y_streamed)
    kept = (h - residual) != 0
    torch.testing.assert_close((h - residual)[kept], aligned[kept] / (1 - p))


def test_dropout_zero_costs_nothing_and_changes_nothing(device):
    x = leaf((8, 32), torch.float32, device, 30)
    residual = leaf((8, 32), torch.float32, device, 31)
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    y, h = fo.fused_add_rms_norm(x, residual, dropout_p=0.0)
    after = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    assert torch.equal(state, after)  # no random numbers drawn
    torch.testing.assert_close(h, x + residual)


# determinism, gradcheck ----------------------------------------------------


# registers with a workspace, registers with the partials held in dx,
# clusters, shared memory with the partials parked in deferred dx rows
@pytest.mark.parametrize("shape", [(1537, 192), (1100, 1024), (70, 40000), (700, 16384)], ids=str)
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_parameter_gradients_are_bitwise_deterministic(kind, shape, device):
    x = random(shape, torch.bfloat16, device, seed=32)
    weight = leaf(shape[-1:], torch.float32, device, 33)
    bias = leaf(shape[-1:], torch.float32, device, 34) if kind == "layer" else None
    dy = random(shape, torch.bfloat16, device, seed=35)
    grads = []
    for _ in range(3):
        weight.grad = None
        if bias is not None:
            bias.grad = None
        y = fo.fused_layer_norm(x, weight, bias) if kind == "layer" else fo.fused_rms_norm(x, weight)
        y.backward(dy)
        grads.append([weight.grad.clone()] + ([bias.grad.clone()] if bias is not None else []))
    for later in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], later))


def peak_extra_bytes(call):
    """Bytes call allocates beyond what is live before it (torch's allocator)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


# the register backward, then the shared-memory backward (a block a row; a
# cluster of 4). Every tensor a whole number of 2 MiB: torch's allocator
# hands out a cached block up to 1 MiB larger than asked for whole, and
# counts it whole, so other sizes compare the allocator's history.
@pytest.mark.parametrize("shape", [(4096, 1024), (1024, 4096), (2048, 512), (768, 16384), (160, 65536)], ids=str)
@pytest.mark.parametrize("kind", ["layer", "rms", "add_rms"])
def test_forward_backward_allocates_no_more_than_torch(kind, shape, device):
    # the weight and bias partials are parked in dx (or dresidual) rows, not
    # in a workspace: forward+backward allocates what eager torch does
    if device.type != "cuda":
        pytest.skip("the CPU takes no workspace")
    gpu = torch.cuda.get_device_properties(device)
    if shape[-1] > 8192 and (gpu.multi_processor_count < 132 or gpu.major < 9):
        # the shared-memory backward's grid (132 groups of a block, 31 of
        # clusters of 4 on the H100) has each group defer the rows its
        # partials are parked in on an H100-sized GPU; elsewhere it may keep
        # its workspace
        pytest.skip("the wide rows' parked partials need an H100-sized GPU")
    x = leaf(shape, torch.bfloat16, device, 60)
    residual = leaf(shape, torch.bfloat16, device, 61)
    weight = leaf(shape[-1:], torch.bfloat16, device, 62)
    bias = leaf(shape[-1:], torch.bfloat16, device, 63)
    dy = random(shape, torch.bfloat16, device, seed=64)
    if kind == "layer":
        inputs, fused = (x, weight, bias), lambda: fo.fused_layer_norm(x, weight, bias)
        eager = lambda: F.layer_norm(x, shape[-1:], weight, bias)
    elif kind == "rms":
        inputs, fused = (x, weight), lambda: fo.fused_rms_norm(x, weight)
        eager = lambda: F.rms_norm(x, shape[-1:], weight)
    else:
        inputs, fused = (x, residual, weight), lambda: fo.fused_add_rms_norm(x, residual, weight)[0]
        eager = lambda: F.rms_norm(x + residual, shape[-1:], weight)
    results = {}
    for name, forward in (("fused", fused), ("eager", eager)):

        def call():
            results[name] = torch.autograd.grad(forward(), inputs, dy)

        call()  # once first: any lazy set-up of either is not counted
        results[name + " bytes"] = peak_extra_bytes(call)
    assert results["fused bytes"] <= results["eager bytes"], results
    for got, expected in zip(results["fused"], results["eager"]):
        torch.testing.assert_close(got.float(), expected.float(), atol=0.25, rtol=0.05)


# The shared-memory backward's partials parked in the rows its owner blocks
# defer, their dx computed after the sums (CUDA): enough rows for each group
# to defer its rows (5 in bf16 LayerNorm) and unequal row counts, in a
# block a row and clusters of 2, 4 and 8. add + RMSNorm writes one gradient
# for x and residual (dresidual; dx is the same tensor), so it parks there.
# The other kinds park in dx: dropout (its mask regenerated in the deferred
# rows), with both gradients or x's alone; an fp32 residual stream (dx of
# x's dtype and dresidual of fp32 both written); dbias alone; a gradient
# arriving at residual_out. On an H100-sized GPU no call asks for a
# workspace. Every call is checked on the CPU as well.
PARKED_KINDS = [
    "layer",
    "layer, bias only",
    "rms",
    "add_rms",
    "add_rms, fp32 residual",
    "add_layer, dropout",
    "add_layer, dropout, x alone",
    "add_rms, residual_out in the loss",
]


# The CPU has no shared-memory kernel: one shape of wide rows checks its values (the float64
# reference of 700 rows takes seconds a case).
CPU_PARKED_SHAPE = (56, 16384)


@pytest.mark.parametrize("shape", [CPU_PARKED_SHAPE, (700, 16384), (340, 32768), (160, 65536), (80, 131072)], ids=str)
@pytest.mark.parametrize("kind", PARKED_KINDS)
def test_shared_backward_partials_parked_in_dx(kind, shape, dtype, device, monkeypatch):
    if (device.type == "cpu") != (shape == CPU_PARKED_SHAPE):
        pytest.skip("the CPU's shape on the CPU, the GPU's on the GPU")
    if kind == "add_rms, fp32 residual" and dtype not in (torch.float16, torch.bfloat16):
        pytest.skip("an fp32 residual stream is for half-precision x")
    cols = shape[-1]
    r_dtype = torch.float32 if kind == "add_rms, fp32 residual" else dtype
    x = leaf(shape, dtype, device, 70)
    residual = leaf(shape, r_dtype, device, 71, grad=not kind.endswith("x alone"))
    weight = leaf((cols,), dtype, device, 72)
    bias = leaf((cols,), dtype, device, 73)
    dy = random(shape, dtype, device, seed=74)
    x64, r64, w64, b64 = as64(x), as64(residual), as64(weight), as64(bias)
    eps = torch.finfo(dtype).eps
    outputs, grads_out = None, None
    if kind == "layer":
        y = fo.fused_layer_norm(x, weight, bias)
        expected = F.layer_norm(x64, (cols,), w64, b64, 1e-5)
        inputs, references = (x, weight, bias), (x64, w64, b64)
    elif kind == "layer, bias only":
        y = fo.fused_layer_norm(x, None, bias)
        expected = F.layer_norm(x64, (cols,), None, b64, 1e-5)
        inputs, references = (x, bias), (x64, b64)
    elif kind == "rms":
        y = fo.fused_rms_norm(x, weight)
        expected = rms_norm_reference(x64, (cols,), w64, eps)
        inputs, references = (x, weight), (x64, w64)
    elif kind.startswith("add_layer, dropout"):
        # the mask is a function of the seed, the offset and the element
        # index: an fp32 twin of the call shows it (in 16-bit, h - residual
        # may round to 0 where x was kept)
        def seeded(*args):
            torch.manual_seed(75)
            if device.type == "cuda":
                torch.cuda.manual_seed(75)
            return fo.fused_add_layer_norm(*args, dropout_p=0.25)

        y, _ = seeded(x, residual, weight, bias)
        with torch.no_grad():
            _, h32 = seeded(x.float(), residual.float())
        kept = ((h32 - residual.float()) != 0).double()  # x is never exactly 0
        expected = F.layer_norm(x64 * kept / 0.75 + r64, (cols,), w64, b64, 1e-5)
        inputs, references = (x, residual, weight, bias), (x64, r64, w64, b64)
        if kind.endswith("x alone"):
            inputs, references = (x, weight, bias), (x64, w64, b64)
    else:
        y, h = fo.fused_add_rms_norm(x, residual, weight)
        expected = rms_norm_reference(x64 + r64, (cols,), w64, eps)
        inputs, references = (x, residual, weight), (x64, r64, w64)
        if kind == "add_rms, residual_out in the loss":
            dh = random(shape, r_dtype, device, seed=76)
            outputs, grads_out = [y, h], [dy, dh]
            expected = [expected, x64 + r64]
            expected_grads_out = [dy.double(), dh.double()]
    if outputs is None:
        outputs, grads_out, expected, expected_grads_out = [y], [dy], [expected], [dy.double()]
    workspaces = []  # what each backward call got: None where the partials were parked
    ask = norm_module.scratch

    def recorded(*args, **kwargs):
        workspaces.append(ask(*args, **kwargs))
        return workspaces[-1]

    monkeypatch.setattr(norm_module, "scratch", recorded)
    grads = torch.autograd.grad(outputs, inputs, grads_out)
    monkeypatch.undo()
    expected_grads = torch.autograd.grad(expected, references, expected_grads_out)
    reduced = [t.shape == (cols,) for t in inputs]
    check_grads(zip(grads, expected_grads, reduced), dtype, shape[0] * 8)
    if device.type == "cuda" and dtype != torch.float64:
        gpu = torch.cuda.get_device_properties(device)
        if gpu.multi_processor_count >= 132 and gpu.major >= 9:  # the grid resident at once
            assert workspaces == [None], [w.numel() if w is not None else 0 for w in workspaces]


@pytest.mark.parametrize("shape", [(1100, 1024), (4096, 64)], ids=str)
def test_parameter_gradients_without_an_input_gradient(shape, device):
    # no dx to park the partials in (CUDA): the workspace path, same values
    x = random(shape, torch.bfloat16, device, seed=50)
    weight = leaf(shape[-1:], torch.bfloat16, device, 51)
    bias = leaf(shape[-1:], torch.bfloat16, device, 52)
    dy = random(shape, torch.bfloat16, device, seed=53)
    fo.fused_layer_norm(x, weight, bias).backward(dy)
    w64, b64 = as64(weight), as64(bias)
    F.layer_norm(x.double(), shape[-1:], w64, b64).backward(dy.double())
    check_grads([(weight.grad, w64.grad, True), (bias.grad, b64.grad, True)], torch.bfloat16, shape[0] * 8)


def test_gradcheck_every_input_of_every_function(device):
    def leaves(*shapes):
        return [leaf(s, torch.float64, device, 40 + i) for i, s in enumerate(shapes)]

    x, residual, weight, bias = leaves((3, 2, 5), (3, 2, 5), (5,), (5,))
    multi_weight, multi_bias = leaves((2, 5), (2, 5))
    gradcheck = torch.autograd.gradcheck
    assert gradcheck(lambda a, w, b: fo.fused_layer_norm(a, w, b), (x, weight, bias))
    assert gradcheck(lambda a, w, b: fo.fused_layer_norm(a, w, b), (x, multi_weight, multi_bias))
    assert gradcheck(lambda a: fo.fused_layer_norm(a, normalized_shape=(2, 5)), (x,))
    assert gradcheck(lambda a, w: fo.fused_rms_norm(a, w, eps=1e-6), (x, weight))
    assert gradcheck(lambda a, w: fo.fused_rms_norm(a, w), (x, multi_weight))
    assert gradcheck(lambda a, r, w, b: fo.fused_add_layer_norm(a, r, w, b), (x, residual, weight, bias))
    assert gradcheck(lambda a, r, w: fo.fused_add_rms_norm(a, r, w), (x, residual, weight))

    def with_dropout(function):
        def run(*args):
            torch.manual_seed(7)  # the same mask on every evaluation
            return function(*args, dropout_p=0.3)

        return run

    assert gradcheck(
        with_dropout(lambda a, r, w, b, **k: fo.fused_add_layer_norm(a, r, w, b, **k)), (x, residual, weight, bias)
    )
    assert gradcheck(with_dropout(lambda a, r, w, **k: fo.fused_add_rms_norm(a, r, w, **k)), (x, residual, weight))


# modules -------------------------------------------------------------------


@pytest.mark.parametrize(
    "fused_cls, torch_cls, kwargs",
    [
        (fo.FusedLayerNorm, torch.nn.LayerNorm, dict(eps=1e-5)),
        (fo.FusedLayerNorm, torch.nn.LayerNorm, dict(bias=False)),
        (fo.FusedLayerNorm, torch.nn.LayerNorm, dict(elementwise_affine=False)),
        (fo.FusedRMSNorm, getattr(torch.nn, "RMSNorm", None), dict()),
        (fo.FusedRMSNorm, getattr(torch.nn, "RMSNorm", None), dict(eps=1e-6)),
    ],
)
def test_modules_swap_with_torch_modules(fused_cls, torch_cls, kwargs, device):
    if torch_cls is None:
        pytest.skip("this torch has no nn.RMSNorm")
    shape = (4, 12)
    ours = fused_cls(shape, device=device, **kwargs)
    theirs = torch_cls(shape, device=device, **kwargs)
    assert repr(ours).replace("Fused", "") == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.equal(a, b), name  # the same initialization
    # load both ways, then the same outputs and gradients
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p))
    ours.load_state_dict(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())
    x = random((3, 4, 12), torch.float32, device, seed=50)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = ours(x1), theirs(x2)
    torch.testing.assert_close(y1, y2, atol=1e-5, rtol=1e-5)
    y1.square().sum().backward()
    y2.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-4, rtol=1e-4)
    for a, b in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-4)


# Bad input to the norms is part of the matrix in tests/test_errors.py, which
# runs every case on every device.


def test_non_contiguous_parameters_are_read_by_their_strides(device):
    x = random((3, 4, 8), torch.float32, device, seed=60).requires_grad_()
    weight = random((16,), torch.float32, device, seed=61)[::2].requires_grad_()
    bias = random((8, 4), torch.float32, device, seed=62).t()  # (4, 8), transposed
    y = fo.fused_layer_norm(x, weight, None)
    expected = F.layer_norm(x.detach().double(), (8,), weight.detach().double())
    assert_close(y, expected, torch.float32)
    y.sum().backward()
    assert weight.grad.shape == (8,)
    y2 = fo.fused_layer_norm(x.detach(), None, bias, normalized_shape=(4, 8))
    assert_close(y2, F.layer_norm(x.detach().double(), (4, 8), None, bias.double()), torch.float32)
    assert_close(
        fo.fused_rms_norm(x.detach(), weight.detach()),
        rms_norm_reference(x.detach().double(), (8,), weight.detach().double(), 1.1920928955078125e-07),
        torch.float32,
    )
