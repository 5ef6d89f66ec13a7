"""torch's own OpInfo sample inputs (0-d, empty, one-element rows, odd eps,
normalized_shape over several dims) run through our functions on every
device and dtype, output and every input gradient against torch's op in
float64 rounded to the dtype. Then the numeric edges they led to: the
LayerNorm backward of one-element and constant rows, and CPU against CUDA
fp16 RMSNorm on strided rows."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import DEVICES, random, requires_gpu

import fused_ops_py as fo

pytest.importorskip("expecttest", reason="torch's OpInfo sample inputs import expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

# (atol, rtol) a dtype, as in Liger-Kernel's tests: about one unit in the
# last place of fp16/bf16 (results rounded from fp32), fp32 and fp64 tight
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
    torch.float64: (1e-10, 1e-10),
}
DTYPES = list(TOLERANCES)
OP_NAMES = ["nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.relu", "square", "sum"]
OPINFOS = {name: next((o for o in op_db if o.name == name and not o.variant_test_name), None) for name in OP_NAMES}


def mapped(name, sample):
    """(ours, reference, tensors) for a sample our API accepts, each function
    taking tensors (None for an absent weight or bias); else the reason our
    API does not accept it."""
    x, args, kwargs = sample.input, list(sample.args), dict(sample.kwargs)
    if name in ("nn.functional.layer_norm", "nn.functional.rms_norm"):
        layer = name == "nn.functional.layer_norm"
        shape, weight, bias = (args + [None, None])[:3]
        shape = tuple(shape)
        eps = kwargs.get("eps", 1e-5 if layer else None)
        if x.dim() == 0:
            return "a 0-d x has no trailing dimensions to normalize (docs/api.md, Normalization)"
        if eps is not None and eps <= 0:
            return f"eps={eps}: our norms require eps > 0 (docs/api.md, Normalization); torch takes it"
        if layer:
            return (
                lambda x, w, b: fo.fused_layer_norm(x, w, b, eps, shape),
                lambda x, w, b: F.layer_norm(x, shape, w, b, eps),
                (x, weight, bias),
            )
        # eps=None is finfo(x.dtype).eps, which the float64 reference must be told
        ref_eps = torch.finfo(x.dtype).eps if eps is None else eps
        return (
            lambda x, w: fo.fused_rms_norm(x, w, eps, shape),
            lambda x, w: F.rms_norm(x, shape, w, ref_eps),
            (x, weight),
        )
    if name == "sum":
        if args or kwargs:
            return f"sum with {args or kwargs}: reduce_sum sums every element, with no dim, keepdim or dtype"
        return fo.reduce_sum, torch.sum, (x,)
    return {"nn.functional.relu": fo.relu, "square": fo.square}[name], OPINFOS[name].op, (x,)


def describe(sample):
    """The sample's shapes and numbers, for a test id: no tensor values."""
    args = [f"T{tuple(a.shape)}" if isinstance(a, torch.Tensor) else a for a in sample.args]
    return f"{tuple(sample.input.shape)}-{args}-{sample.kwargs}".replace(" ", "").replace("'", "")


def opinfo_params():
    """One param a sample, op, device and dtype; samples drawn once, seeded."""
    params = []
    for name, opinfo in OPINFOS.items():
        if opinfo is None:
            params.append(pytest.param(name, None, None, None, id=f"{name}-absent"))
            continue
        for device in DEVICES:
            for dtype in DTYPES:
                torch.manual_seed(0)
                for i, sample in enumerate(opinfo.sample_inputs(device, dtype, requires_grad=True)):
                    params.append(
                        pytest.param(
                            name, device, dtype, sample, id=f"{name}-{device}-{str(dtype)[6:]}-{i}-{describe(sample)}"
                        )
                    )
    return params


def first_mismatches(actual, expected, atol, rtol, count=5):
    bad = ~torch.isclose(actual.double().cpu(), expected.double().cpu(), atol=atol, rtol=rtol, equal_nan=True)
    where = bad.nonzero()[:count].tolist()
    return "; ".join(
        f"at {tuple(i)}: {actual.cpu()[tuple(i)].item()!r} vs {expected.cpu()[tuple(i)].item()!r}" for i in where
    )


def check(what, actual, expected, dtype):
    atol, rtol = TOLERANCES[dtype]
    expected = expected.to(dtype)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    if not torch.allclose(actual.double().cpu(), expected.double().cpu(), atol=atol, rtol=rtol, equal_nan=True):
        pytest.fail(f"{what}: {first_mismatches(actual, expected, atol, rtol)}")


def fresh(tensors, dtype=None):
    """New leaves with the sample's values and requires_grad (float64 if asked)."""
    return [
        None if t is None else t.detach().to(dtype or t.dtype).clone().requires_grad_(t.requires_grad) for t in tensors
    ]


@pytest.mark.parametrize("upstream", ["random", "sum"])
@pytest.mark.parametrize("name, device, dtype, sample", opinfo_params())
def test_opinfo_sample_matches_torch(name, device, dtype, sample, upstream):
    if OPINFOS[name] is None:
        pytest.skip(f"torch {torch.__version__} has no OpInfo named {name}")
    call = mapped(name, sample)
    if isinstance(call, str):
        pytest.skip(call)
    ours, reference, tensors = call
    leaves, leaves64 = fresh(tensors), fresh(tensors, torch.float64)
    out, out64 = ours(*leaves), reference(*leaves64)
    check("output", out, out64, dtype)
    wanted = [i for i, t in enumerate(leaves) if t is not None and t.requires_grad]
    if upstream == "random":  # an upstream gradient of out's shape
        dy = random(out.shape, dtype, out.device, seed=1)
        grads = torch.autograd.grad(out, [leaves[i] for i in wanted], dy)
        grads64 = torch.autograd.grad(out64, [leaves64[i] for i in wanted], dy.double())
    else:  # out.sum()'s backward hands the op a stride-0 gradient
        grads = torch.autograd.grad(out.sum(), [leaves[i] for i in wanted])
        grads64 = torch.autograd.grad(out64.sum(), [leaves64[i] for i in wanted])
    for i, grad, grad64 in zip(wanted, grads, grads64):
        check(f"gradient of input {i}", grad, grad64, dtype)


# What each op's accepted samples must include, so that a torch whose
# samples change (or a mapping that skips too much) cannot drop the edges
EDGES = {
    "nn.functional.layer_norm": {"empty", "one-element row"},
    "nn.functional.rms_norm": {"empty", "one-element row"},
    "nn.functional.relu": {"0-d"},
    "square": {"0-d", "empty"},
    "sum": {"0-d"},
}


@pytest.mark.parametrize("name", OP_NAMES)
def test_accepted_opinfo_samples_include_the_edges(name):
    if OPINFOS[name] is None:
        pytest.skip(f"torch {torch.__version__} has no OpInfo named {name}")
    found = set()
    for sample in OPINFOS[name].sample_inputs("cpu", torch.float32, requires_grad=True):
        if isinstance(mapped(name, sample), str):
            continue
        x = sample.input
        row = math.prod(sample.args[0]) if name.endswith("_norm") else (x.shape[-1] if x.dim() else 1)
        found |= {
            edge
            for edge, present in (("0-d", x.dim() == 0), ("empty", x.numel() == 0), ("one-element row", row == 1))
            if present
        }
    assert EDGES[name] <= found, f"accepted {name} samples lack {EDGES[name] - found}"


@pytest.mark.parametrize("shape", [(5, 1), (3, 4, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_backward_of_one_element_rows_is_exactly_zero(device, dtype, shape):
    # x - mean is 0 in every row, whatever the rounding of the mean, as in torch
    x = random(shape, dtype, device, seed=0).requires_grad_()
    weight = random((1,), dtype, device, seed=1).requires_grad_()
    bias = random((1,), dtype, device, seed=2).requires_grad_()
    dy = random(shape, dtype, device, seed=3)
    (dx,) = torch.autograd.grad(fo.fused_layer_norm(x, weight, bias, 1e-5), [x], dy)
    assert torch.equal(dx, torch.zeros_like(x)), f"dx of one-element rows: {dx.flatten().tolist()}"


@pytest.mark.parametrize("cols", [7, 64, 1000, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_of_constant_rows_matches_torch(device, dtype, cols):
    # a constant row's mean rounds in most sums, yet x - mean must be 0;
    # values of a few units, so that a rounded mean shows through rstd
    values = 8 * random((6, 1), dtype, device, seed=0)
    x = values.expand(6, cols).contiguous().requires_grad_()
    weight = random((cols,), dtype, device, seed=1).requires_grad_()
    bias = random((cols,), dtype, device, seed=2).requires_grad_()
    dy = random((6, cols), dtype, device, seed=3)
    check_layer_norm(fo.fused_layer_norm(x, weight, bias, 1e-5), x, x, weight, bias, dy, dtype)


def check_layer_norm(y, x, h, weight, bias, dy, dtype):
    """y, and its gradients of x, weight and bias, against torch's LayerNorm
    of h (x, or x + residual as rounded) in float64."""
    h64, weight64, bias64 = (t.detach().double().requires_grad_() for t in (h, weight, bias))
    y64 = F.layer_norm(h64, h.shape[-1:], weight64, bias64, 1e-5)
    check("output", y, y64, dtype)
    grads = torch.autograd.grad(y, [x, weight, bias], dy)
    grads64 = torch.autograd.grad(y64, [h64, weight64, bias64], dy.double())
    for what, grad, grad64 in zip(("dx", "dweight", "dbias"), grads, grads64):
        check(what, grad, grad64, dtype)


@pytest.mark.parametrize("residual_dtype", ["same", "float32"])
@pytest.mark.parametrize("cols", [64, 1000, 4096])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("device", DEVICES)
def test_add_layer_norm_of_constant_sums_matches_torch(device, dtype, cols, residual_dtype):
    # h = x + residual constant in each row: as exact as the plain norm's
    r_dtype = torch.float32 if residual_dtype == "float32" else dtype
    if r_dtype != dtype and dtype not in (torch.float16, torch.bfloat16):
        pytest.skip("an fp32 residual goes beside 16-bit x")
    x = (8 * random((6, 1), dtype, device, seed=0)).expand(6, cols).contiguous().requires_grad_()
    residual = (4 * random((6, 1), r_dtype, device, seed=4)).expand(6, cols).contiguous()
    weight = random((cols,), dtype, device, seed=1).requires_grad_()
    bias = random((cols,), dtype, device, seed=2).requires_grad_()
    dy = random((6, cols), dtype, device, seed=3)
    y, h = fo.fused_add_layer_norm(x, residual, weight, bias, 1e-5)
    h_rounded = (x.detach().to(torch.float64) + residual.to(torch.float64)).to(r_dtype)
    assert torch.equal(h, h_rounded)
    check_layer_norm(y, x, h_rounded, weight, bias, dy, dtype)


def ordered(bits):
    """fp16 bit patterns as integers whose difference counts ulps across 0."""
    bits = bits.view(torch.int16).int()
    return torch.where(bits < 0, -(bits & 0x7FFF), bits)


@requires_gpu()
@pytest.mark.parametrize("offset", [3, 8], ids=lambda o: f"offset{o}")
@pytest.mark.parametrize("cols", [1, 7, 64, 1000, 4096])
def test_rms_norm_fp16_cpu_and_cuda_agree_within_one_ulp_on_strided_rows(cols, offset):
    big = random((37, cols + 16), torch.float16, "cpu", seed=0)
    weight = random((cols,), torch.float16, "cpu", seed=1)
    x = big[:, offset : offset + cols]  # rows of a wider tensor: a row stride of cols + 16
    on_cpu = fo.fused_rms_norm(x, weight)
    on_cuda = fo.fused_rms_norm(big.cuda()[:, offset : offset + cols], weight.cuda()).cpu()
    assert torch.equal(on_cpu.isfinite(), on_cuda.isfinite())
    ulps = (ordered(on_cpu) - ordered(on_cuda)).abs()[on_cpu.isfinite()]
    assert ulps.numel() == 0 or ulps.max().item() <= 1, (
        f"max {ulps.max().item()} ulps apart; {(ulps > 1).sum().item()} of {ulps.numel()} more than one"
    )
