"""The norms, relu(x * scale + bias), square, reduce_sum, GeGLU, SwiGLU and
cross-entropy remember what they worked out for a call's signature (its checks passed, a
template struct); a call that hits that memory must be answered exactly as
a fresh one: over good calls with some arguments swapped for bad or unusual
ones, each call gives the same result (values, or the exception and its
message) with the signatures of every earlier call remembered as with none."""

import random as stdlib_random

import torch

import fused_ops_py as fo
from fused_ops_py.ops import bias_scale_relu as relu_op
from fused_ops_py.ops import cross_entropy as cross_entropy_op
from fused_ops_py.ops import geglu as geglu_op
from fused_ops_py.ops import norm_calls as norm_op
from fused_ops_py.ops import reduce_sum as reduce_sum_op
from fused_ops_py.ops import square as square_op
from fused_ops_py.ops import swiglu as swiglu_op

SAMPLES = 3000


def outcome(call):
    """What a call answers: ("ok", its outputs) or (exception type, message)."""
    try:
        return "ok", call()
    except Exception as error:  # the very exception is what is compared
        return type(error), str(error)


def same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    return a == b


def tensors(device):
    """Good and bad values for x, weight, bias, residual."""
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
        torch.ones(8, device=d, dtype=torch.int64),
        [1.0] * 8,
        "weight",
        None,
    ]
    if d.type == "cuda" or torch.cuda.is_available():
        other = "cpu" if d.type == "cuda" else "cuda"
        values += [torch.randn(8, device=other), torch.randn(4, 8, device=other)]
    return values


NUMBERS = [
    1e-5,
    1e-6,
    0.0,
    -1e-5,
    0.5,
    0.99,
    1.0,
    2.0,
    float("nan"),
    float("inf"),
    -float("inf"),
    1,
    0,
    True,
    None,
    "0.1",
    torch.tensor(0.1),
]
SHAPES = [None, (8,), 8, [8], torch.Size([8]), (4, 8), (7,), (), (0,), (2, 4, 8)]


def swapped(rng, goods, pools, count, most):
    """Calls from goods with 0 to `most` of their arguments swapped for any
    value of that position's pool."""
    for _ in range(count):
        call = list(rng.choice(goods))
        for position in rng.sample(range(len(call)), rng.randint(0, most)):
            call[position] = rng.choice(pools[position])
        yield call


def answers_as_fresh(plans, calls):
    """Each of calls answers as it does with plans forgotten (and then
    restored, every earlier signature remembered)."""
    ok = 0
    with torch.no_grad():
        for args, call in calls:
            remembered = outcome(call)
            kept = dict(plans)
            plans.clear()
            fresh = outcome(call)
            plans.update(kept)
            assert remembered[0] == fresh[0], (args, remembered, fresh)
            assert same(remembered[1], fresh[1]), (args, remembered, fresh)
            ok += fresh[0] == "ok"
    assert ok > SAMPLES // 10


def samples(device, count):
    """(x, residual, weight, bias, eps, dropout_p, normalized_shape): a good
    call with 0 to 3 of its arguments swapped for any value, so that near
    misses of a remembered signature come up often."""
    rng = stdlib_random.Random(0)
    values = tensors(device)
    x, r = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)
    w, b = torch.randn(8, device=device), torch.randn(8, device=device)
    half = x.bfloat16()
    goods = [
        [x, r, w, b, 1e-5, 0.0, None],
        [x, None, w, None, None, 0.0, (8,)],
        [half, r, w, b, 1e-6, 0.5, None],
        [half, half, w.bfloat16(), None, 1e-5, 0.1, None],
        [x.double(), None, None, None, 1e-5, 0.0, None],
    ]
    return swapped(rng, goods, [values] * 4 + [NUMBERS, NUMBERS, SHAPES], count, 3)


def norm_call(x, residual, weight, bias, eps, dropout_p, normalized_shape):
    """The call a sample stands for, with the dropout stream fixed."""

    def call():
        torch.manual_seed(0)
        if residual is None and dropout_p in (0.0, None) and normalized_shape is not None:
            return fo.fused_layer_norm(x, weight, bias, eps, normalized_shape)
        if residual is None:
            return fo.fused_rms_norm(x, weight, eps)
        return fo.fused_add_layer_norm(x, residual, weight, bias, eps, dropout_p)

    return call


def test_remembered_signatures_answer_as_fresh_calls(device):
    answers_as_fresh(norm_op._norm_forward_plans, ((sample, norm_call(*sample)) for sample in samples(device, SAMPLES)))


def relu_samples(device, count):
    """(x, bias, scale): a good call with 0 to 2 of its arguments swapped."""
    rng = stdlib_random.Random(1)
    values = tensors(device)
    x, b = torch.randn(4, 8, device=device), torch.randn(8, device=device)
    goods = [[x, b, 0.5], [x, None, 1.0], [x.bfloat16(), b, 2.0], [x.bfloat16(), b.bfloat16(), -1.0]]
    return swapped(rng, goods, [values, values, NUMBERS], count, 2)


def test_bias_scale_relu_remembers_as_fresh_calls(device):
    answers_as_fresh(
        relu_op._bias_scale_relu_forward_plans,
        ((args, lambda args=args: fo.fused_bias_scale_relu(*args)) for args in relu_samples(device, SAMPLES)),
    )


def test_square_and_reduce_sum_remember_as_fresh_calls(device):
    rng = stdlib_random.Random(4)
    x = torch.randn(4, 8, device=device)
    goods = [[x], [x.bfloat16()], [x.t()], [x.double()[:, ::2]]]
    for plans, op in ((square_op._square_plans, fo.square), (reduce_sum_op._reduce_sum_plans, fo.reduce_sum)):
        calls = swapped(rng, goods, [tensors(device)], SAMPLES, 1)
        answers_as_fresh(plans, ((args, lambda args=args, op=op: op(*args)) for args in calls))


def test_gated_units_remember_as_fresh_calls(device):
    rng = stdlib_random.Random(2)
    values = tensors(device)
    g, u = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)
    goods = [[g, u, "tanh"], [g.bfloat16(), u.bfloat16(), "none"], [g.t().contiguous().t(), u, "tanh"]]
    pools = [values, values, ["tanh", "none", "erf", None, 1, ["tanh"]]]
    geglu = ((args, lambda args=args: fo.fused_geglu(*args)) for args in swapped(rng, goods, pools, SAMPLES, 2))
    answers_as_fresh(geglu_op._geglu_plans, geglu)
    swiglu = ((args, lambda args=args: fo.fused_swiglu(*args[:2])) for args in swapped(rng, goods, pools, SAMPLES, 2))
    answers_as_fresh(swiglu_op._swiglu_plans, swiglu)


def test_cross_entropy_remembers_as_fresh_calls(device):
    rng = stdlib_random.Random(3)
    # logits whose classes hold every target drawn, never an ignored one
    # (a class out of range is a device-side stop on CUDA, not an answer)
    logits = [v for v in tensors(device) if not (isinstance(v, torch.Tensor) and v.dim() and v.shape[-1] < 7)]
    x = torch.randn(4, 8, device=device)
    t = torch.randint(0, 7, (4,), device=device)
    targets = [
        t,
        t.int(),
        t.float(),
        t[:3],
        t.view(4, 1),
        torch.randint(0, 7, (2, 4), device=device),
        [0, 1, 2, 3],
        None,
    ]
    if torch.cuda.is_available():
        targets.append(t.to("cpu" if device.type == "cuda" else "cuda"))
    goods = [
        [x, t, -100, 0.0, "mean", None],
        [x.bfloat16(), t, 3, 0.1, "sum", 30.0],
        [x.t().contiguous().t(), t, -100, 0.0, "none", None],
    ]
    pools = [
        logits,
        targets,
        [-100, 0, 3, True, 1.5, None],
        NUMBERS,
        ["mean", "sum", "none", "avg", None, 1],
        [None, 0.0, 1.0, 30.0, -1.0, float("nan"), 1, "x"],
    ]

    def call(args):
        x, target, ignore_index, label_smoothing, reduction, softcap = args
        return lambda: fo.fused_cross_entropy(
            x, target, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction, softcap=softcap
        )

    answers_as_fresh(
        cross_entropy_op._cross_entropy_plans, ((args, call(args)) for args in swapped(rng, goods, pools, SAMPLES, 2))
    )
