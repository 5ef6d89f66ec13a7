"""The CPU kernels split their work over torch.get_num_threads() threads:
every output, gradients included, has the same bits on one thread as on
several, and the values agree with float64 references on a shape large
enough to be split."""

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, random

import fused_ops_py as fo
from fused_ops_py._ffi import lib

# 1.07M elements, worth 16 threads (a thread takes at least 2^16 elements);
# 1032 columns: five 256-element pieces a row, the last one short.
SHAPE = (1040, 1032)
COLS = SHAPE[-1]

# classes of cross-entropy's rows
TARGET = torch.randint(0, COLS, SHAPE[:1], generator=torch.Generator().manual_seed(4))

# name: (fused call, float64 reference or None, its inputs): x and r are
# [rows, cols], w is [cols].
CASES = {
    "layer_norm": (
        lambda x, w: fo.fused_layer_norm(x, w, w * 0.5),
        lambda x, w: F.layer_norm(x, (COLS,), w, w * 0.5),
        "xw",
    ),
    "rms_norm": (
        lambda x, w: fo.fused_rms_norm(x, w),
        lambda x, w: F.rms_norm(x, (COLS,), w, torch.finfo(torch.float32).eps),
        "xw",
    ),
    "add_rms_norm_dropout": (lambda x, r, w: fo.fused_add_rms_norm(x, r, w, dropout_p=0.25), None, "xrw"),
    "bias_scale_relu": (lambda x, w: fo.fused_bias_scale_relu(x, w, 0.5), lambda x, w: torch.relu(x * 0.5 + w), "xw"),
    "relu": (fo.relu, torch.relu, "x"),
    "square": (fo.square, lambda x: x * x, "x"),
    "swiglu": (fo.fused_swiglu, lambda x, r: F.silu(x) * r, "xr"),
    "geglu": (fo.fused_geglu, lambda x, r: F.gelu(x, approximate="tanh") * r, "xr"),
    "geglu_erf": (lambda x, r: fo.fused_geglu(x, r, approximate="none"), lambda x, r: F.gelu(x) * r, "xr"),
    "clamped_swiglu": (lambda x: fo.fused_clamped_swiglu(x * 4, limit=3.0), lambda x: clamped_swiglu(x * 4, 3.0), "x"),
    "rope": (lambda x, r: rope_of(fo.fused_rope, x, r), lambda x, r: rope_of(hf_rope, x, r), "xr"),
    "reduce_sum": (fo.reduce_sum, torch.sum, "x"),
    "cross_entropy": (
        lambda x: fo.fused_cross_entropy(x * 4, TARGET, reduction="none", label_smoothing=0.1),
        lambda x: F.cross_entropy(x * 4, TARGET, reduction="none", label_smoothing=0.1),
        "x",
    ),
}


def clamped_swiglu(x, limit):
    """gpt-oss's gate over (gate, up) pairs."""
    gate, up = x[..., ::2].clamp(max=limit), x[..., 1::2].clamp(-limit, limit)
    return (up + 1) * gate * torch.sigmoid(1.702 * gate)


def hf_rope(q, k, cos, sin):
    """Hugging Face's apply_rotary_pos_emb (unsqueeze_dim=1), partial rotary."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rotary, half = cos.shape[-1], cos.shape[-1] // 2
    out = []
    for x in (q, k):
        x_rot = x[..., :rotary]
        rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
        out.append(torch.cat([x_rot * cos + rotated * sin, x[..., rotary:]], dim=-1))
    return torch.cat([t.flatten() for t in out])


def rope_of(rope, x, r):
    """rope of x and r as [8, 6, 130, 172] (each row 6 heads), 64 of 172
    dimensions rotated, by tables made from x (no gradient)."""
    q, k = (t.view(8, 130, 6, 172).transpose(1, 2) for t in (x, r))
    angles = x.detach().view(8, 130, -1)[..., :64]
    result = rope(q, k, angles.cos(), angles.sin())
    return result if isinstance(result, torch.Tensor) else torch.cat([t.flatten() for t in result])


INPUTS = {"x": (SHAPE, 1), "r": (SHAPE, 2), "w": ((COLS,), 3)}


def inputs_of(names, dtype):
    return [random(INPUTS[n][0], dtype, "cpu", seed=INPUTS[n][1]) for n in names]


def run(fn, inputs, threads):
    """(outputs..., input gradients...) of fn on `threads` CPU threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)  # the dropout seed
        leaves = [t.detach().requires_grad_() for t in inputs]
        outputs = fn(*leaves)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        assert lib.fo_get_cpu_threads() == threads
        cotangents = [random(o.shape, o.dtype, "cpu", seed=9 + i) for i, o in enumerate(outputs)]
        grads = torch.autograd.grad(outputs, leaves, cotangents)
        return [o.detach() for o in outputs] + list(grads)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("case", CASES)
def test_same_bits_on_one_thread_and_several(case):
    fused, _, names = CASES[case]
    # float64: the CPU adds in double, and float32 outputs would round away
    # a sum taken in another order
    inputs = inputs_of(names, torch.float64)
    one = run(fused, inputs, 1)
    for threads in (2, 4):
        many = run(fused, inputs, threads)
        assert len(one) == len(many)
        for a, b in zip(one, many):  # zip(strict=True) is Python 3.10+
            assert torch.equal(a, b), f"{case}: other bits on {threads} threads than on 1"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_cross_entropy_same_bits_in_float(dtype):
    """Cross-entropy's rows of 32- and 16-bit logits take their exps in
    float, not double: the same bits on every thread count too."""
    inputs = inputs_of("x", dtype)
    one = run(CASES["cross_entropy"][0], inputs, 1)
    for threads in (2, 4):
        for a, b in zip(one, run(CASES["cross_entropy"][0], inputs, threads)):
            assert torch.equal(a, b), f"other bits on {threads} threads than on 1"


@pytest.mark.parametrize("case", [name for name, (_, reference, _) in CASES.items() if reference])
def test_values_when_split(case):
    fused, reference, names = CASES[case]
    inputs = inputs_of(names, torch.float32)
    got = run(fused, inputs, 4)
    leaves = [t.double().requires_grad_() for t in inputs]
    expected = reference(*leaves)
    cotangent = random(expected.shape, torch.float32, "cpu", seed=9)
    grads = torch.autograd.grad(expected, leaves, cotangent.double())
    expected_all = [expected.detach(), *grads]
    assert len(got) == len(expected_all)
    for g, e in zip(got, expected_all):
        assert_close(g, e, torch.float32)  # sums too: the CPU adds in double


def test_a_forked_child_runs_its_own_pool():
    """The pool's threads are not in a child of fork() (a DataLoader's
    workers): the child starts its own and gets the parent's bits. The
    child runs no parallel torch op: OpenMP's own pool hangs after fork."""
    import os

    x = random(SHAPE, torch.float32, "cpu", seed=1)
    torch.set_num_threads(2)
    expected = fo.square(x).numpy().tobytes()  # the parent's pool has started
    assert lib.fo_get_cpu_threads() == 2
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when its result matches
        try:
            os._exit(0 if fo.square(x).numpy().tobytes() == expected else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_callers_on_several_threads_share_the_pool():
    """While the pool runs one caller's job another caller's call runs on
    its own thread: every result has the bits of a call made alone."""
    from concurrent.futures import ThreadPoolExecutor

    inputs = [random(SHAPE, torch.float32, "cpu", seed=s) for s in range(6)]
    torch.set_num_threads(2)
    alone = [fo.square(x) for x in inputs]
    with ThreadPoolExecutor(3) as callers:
        together = list(callers.map(lambda x: [fo.square(x) for _ in range(20)], inputs))
    for expected, results in zip(alone, together):
        assert all(torch.equal(expected, r) for r in results)
