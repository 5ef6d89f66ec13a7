"""The checks' common case (a few attribute reads, for speed) lets through
only what the full checks accept, with the same values: over good calls
with some arguments swapped for bad or unusual ones, whatever the quick
test of the norms passes, their full checks pass with the same result; and
the checks of bias_scale_relu and swiglu (quick test, then full checks)
answer as their full checks alone do, errors and messages included."""

import random as stdlib_random

import pytest
import torch

from fused_ops_py import functional, normalization

SAMPLES = 3000


def outcome(check, *args):
    """What a check answers: ("ok", its result) or (exception type, message)."""
    try:
        return "ok", check(*args)
    except Exception as error:  # the very exception is what is compared
        return type(error), str(error)


def tensors(device):
    """Good and bad values for x, weight, bias, residual, gate, up."""
    d = device
    values = [
        torch.randn(4, 8, device=d),
        torch.randn(4, 8, device=d).t().contiguous().t(),  # non-contiguous, same shape
        torch.randn(4, 8, device=d, dtype=torch.bfloat16),
        torch.randn(4, 8, device=d, dtype=torch.float16),
        torch.randn(4, 8, device=d, dtype=torch.float64),
        torch.randn(2, 4, 8, device=d),
        torch.randn(4, 7, device=d),
        torch.randn(4, 0, device=d),
        torch.randn(0, 8, device=d),
        torch.tensor(1.0, device=d),
        torch.ones(4, 8, device=d, dtype=torch.int32),
        torch.randn(8, device=d),
        torch.randn(8, device=d, dtype=torch.bfloat16),
        torch.randn(8, device=d, dtype=torch.float64),
        torch.randn(16, device=d)[::2],  # a strided parameter
        torch.randn(7, device=d),
        torch.randn(4, 8, device=d)[0],
        torch.randn(0, device=d),
        torch.randn(8, device="meta"),
        torch.randn(4, 8, device="meta"),
        torch.nn.Parameter(torch.randn(8, device=d)),
        torch.ones(8, device=d, dtype=torch.int64),
        [1.0] * 8,
        "weight",
        None,
    ]
    if d.type == "cuda" or torch.cuda.is_available():
        other = "cpu" if d.type == "cuda" else "cuda"
        values += [torch.randn(8, device=other), torch.randn(4, 8, device=other)]
    return values


NUMBERS = [1e-5, 1e-6, 0.0, -1e-5, 0.5, 0.99, 1.0, 2.0, float("nan"), float("inf"), -float("inf"),
           1, 0, True, None, "0.1", torch.tensor(0.1)]
SHAPES = [None, (8,), 8, [8], torch.Size([8]), (4, 8), (7,), (), (0,), (2, 4, 8)]


def samples(device, count):
    """(x, residual, weight, bias, a number, a number, a normalized_shape):
    a good call with 0 to 3 of its arguments swapped for any value, so that
    near misses of the common case come up often."""
    rng = stdlib_random.Random(0)
    values = tensors(device)
    x, r = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)
    w, b = torch.randn(8, device=device), torch.randn(8, device=device)
    half = x.bfloat16()
    goods = [[x, r, w, b, 1e-5, 0.0, None], [x, None, w, None, None, 0.0, (8,)],
             [half, r, w, b, 1e-6, 0.5, None], [half, half, w.bfloat16(), None, 1e-5, 0.1, None],
             [x.double(), None, None, None, 1e-5, 0.0, None]]
    pools = [values] * 4 + [NUMBERS, NUMBERS, SHAPES]
    for _ in range(count):
        call = list(rng.choice(goods))
        for position in rng.sample(range(7), rng.randint(0, 3)):
            call[position] = rng.choice(pools[position])
        yield call[:4], call[4], call[5], call[6]


def test_norm_common_case_agrees_with_the_full_checks(device):
    fn, seen = "fused_layer_norm", 0
    for (x, residual, weight, bias), eps, dropout_p, normalized_shape in samples(device, SAMPLES):
        args = (x, residual, weight, bias, eps, dropout_p, normalized_shape)
        cols = normalization._common_case_cols(*args)
        if not cols:
            continue
        seen += 1
        if eps is None:
            eps = normalization._DEFAULT_EPS[x.dtype]
        assert outcome(normalization._check_fully, fn, *args) == ("ok", (cols, eps, dropout_p)), args
    assert seen > SAMPLES // 10  # the sample reaches the common case


def test_norm_common_case_on_typical_calls(device):
    # the calls the common case is for, each told by the quick test alone
    x, r = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)
    w, b = torch.randn(8, device=device), torch.randn(8, device=device)
    half = x.bfloat16()
    for args in [(x, None, w, b, 1e-5, 0.0, None), (x, None, w, None, None, 0.0, None),
                 (x, r, w, None, 1e-6, 0.1, None), (x, None, w, b, 1e-5, 0.0, (8,)),
                 (half, r, w, b, 1e-5, 0.0, None), (x, None, None, None, 1e-5, 0.0, None)]:
        assert normalization._common_case_cols(*args) == 8


@pytest.mark.parametrize("op", ["bias_scale_relu", "swiglu"])
def test_functional_checks_agree_with_the_full_checks(op, device):
    front = getattr(functional, f"_check_{op}")
    full = getattr(functional, f"_check_{op}_fully")
    quick = 0
    for (a, b, _, _), number, _, _ in samples(device, SAMPLES):
        args = (a, b, number) if op == "bias_scale_relu" else (a, b)
        answer = outcome(front, op, *args)
        assert answer == outcome(full, op, *args), args
        quick += answer[0] == "ok"
    assert quick > SAMPLES // 10

