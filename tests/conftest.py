"""Shared test parameters: devices, dtypes with their tolerances, shapes."""

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
