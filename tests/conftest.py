"""Shared test parameters: devices, dtypes with their tolerances, shapes."""

import math
import sys
import types

import pytest
import torch

DEVICES = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())][:1]

# Tolerances against a float64 reference rounded to the dtype: about two units
# in the last place of each dtype (fp32 compute for the half types).
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2),
    torch.float64: dict(atol=1e-12, rtol=1e-12),
}
DTYPES = list(TOLERANCES)

# Empty, one element, odd and prime sizes, one row, one column, a row long
# enough for many chunks, 3-d, and shapes whose last dimension is a multiple
# of 8 (the 16-byte vector path on the GPU).
SHAPES = [
    (0, 7),
    (5, 0),
    (1, 1),
    (1,),
    (),
    (7, 13),
    (1, 4099),
    (257, 1),
    (31, 257),
    (3, 70001),
    (2, 3, 17),
    (64, 1024),
    (4, 6, 40),
]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture(params=DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def dtype(request):
    return request.param


def random(shape, dtype, device, seed=0):
    """Random normal values (never zeros: they hide unwritten outputs)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype).to(device)


def fp8_reference(x, recipe="rowwise", dtype=torch.float8_e4m3fn):
    """(x_fp8, scale) with x ~= x_fp8.float() * scale: torchao.float8's scaling in
    plain torch, the reference fused_quantize_fp8 and Float8Linear must match. amax over the finite values of each
    row (rowwise) or of the tensor (tensorwise); the multiplier fmax / amax, for
    rowwise rounded down to a power of two (torchao's scales); scale [..., 1] for
    rowwise, 0-d for tensorwise."""
    fmax = torch.finfo(dtype).max
    shape = x.shape if x.dim() else (1,)
    # a dense copy: a view of a transposed x would carry its column-major strides
    rows = x.reshape(math.prod(shape[:-1]), shape[-1]).float().contiguous()
    magnitude = rows.abs()
    finite = torch.where(torch.isfinite(magnitude), magnitude, torch.zeros_like(magnitude))
    if not finite.numel():  # amax refuses an empty reduction
        amax = finite.new_zeros((rows.shape[0], 1) if recipe == "rowwise" else ())
    elif recipe == "rowwise":
        amax = finite.amax(dim=1, keepdim=True)
    else:
        amax = finite.amax()
    multiplier = (fmax / amax.double().clamp(min=1e-12)).float()
    if recipe == "rowwise":
        multiplier = (multiplier.view(torch.int32) & -(1 << 23)).view(torch.float32)
    data = (rows * multiplier).clamp(-fmax, fmax).to(dtype).reshape(x.shape)
    scale = multiplier.reciprocal()
    if recipe == "rowwise":
        scale = scale.reshape(x.shape[:-1] + (1,))
    return data, scale


def assert_close(actual, expected, dtype):
    """actual against a float64 reference rounded to the dtype under test."""
    assert actual.dtype == expected.dtype or expected.dtype == torch.float64
    torch.testing.assert_close(actual.cpu().double(), expected.cpu().to(dtype).double(), **TOLERANCES[dtype])


@pytest.fixture
def restored_modeling_functions():
    """patch replaces functions of transformers' modeling modules (such as
    apply_rotary_pos_emb) process-wide: the originals are put back after
    the test."""
    yield
    for name, module in list(sys.modules.items()):
        if not name.startswith("transformers.") or module is None:
            continue
        for attribute, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType) and getattr(value, "fused_ops_py", False):
                setattr(module, attribute, value.__wrapped__)


def requires_gpu(count=1):
    return pytest.mark.skipif(torch.cuda.device_count() < count, reason=f"needs {count} CUDA GPU(s)")
