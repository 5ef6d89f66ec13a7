"""fused_cross_entropy and fused_linear_cross_entropy against
F.cross_entropy in float64: values and gradients for every option,
incoming gradients other than 1, the second-backward error, errors,
determinism, torch.compile, CUDA graphs and the linear loss's memory."""

import weakref

import pytest
import torch
import torch.nn.functional as F
from conftest import TOLERANCES, assert_close, random, requires_gpu
from torch.utils._python_dispatch import TorchDispatchMode

import fused_ops_py as fo
from fused_ops_py import _core
from fused_ops_py._ffi import check
from fused_ops_py.ops import cross_entropy, linear_cross_entropy

REDUCTIONS = ["mean", "sum", "none"]
VOCABS = [7, 1000, 32003]

# options of a call: the default ignore_index with some targets ignored,
# label smoothing beside ignored targets, a softcap, all of them, and an
# ignore_index that is a class
OPTIONS = {
    "plain": dict(),
    "ignored": dict(ignored=True),
    "smoothing": dict(ignored=True, label_smoothing=0.1),
    "softcap": dict(softcap=3.0),
    "all": dict(ignored=True, label_smoothing=0.25, softcap=2.0),
    "ignore_a_class": dict(ignore_index=3),
}


def targets(shape, vocab, device, seed=0, ignored=False, ignore_index=-100):
    """Random classes; with ignored, every third is ignore_index."""
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, vocab, shape, generator=generator, dtype=torch.int64)
    if ignored:
        target.view(-1)[::3] = ignore_index
    return target.to(device)


def split(options):
    """(how targets are drawn, the keyword arguments of the call)."""
    kwargs = {k: v for k, v in options.items() if k != "ignored"}
    return options.get("ignored", False), kwargs


def reference(logits, target, ignore_index=-100, label_smoothing=0.0, reduction="mean", softcap=None):
    """F.cross_entropy in float64 over the last dimension (an independent
    formula: softcap applied by torch's own tanh)."""
    z = logits.double()
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    loss = F.cross_entropy(
        z.reshape(-1, z.shape[-1]),
        target.reshape(-1),
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )
    return loss.reshape(target.shape) if reduction == "none" else loss


def incoming(loss, seed=7):
    """An incoming gradient other than 1: 0.25 for a mean or sum, random
    positive row weights for none."""
    if loss.dim() == 0:
        return torch.full_like(loss, 0.25)
    return (random(loss.shape, torch.float64, "cpu", seed=seed).abs() + 0.1).to(loss.dtype).to(loss.device)


def leaf(shape, dtype, device, seed):
    return random(shape, dtype, device, seed=seed).requires_grad_()


def as64(t):
    return None if t is None else t.detach().double().requires_grad_()


# fused_cross_entropy --------------------------------------------------------


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("vocab", VOCABS)
def test_values_and_gradients(vocab, reduction, options, dtype, device):
    ignored, kwargs = split(options)
    rows = 5 if vocab > 1000 else 23
    logits = (random((rows, vocab), dtype, device, seed=vocab) * 4).requires_grad_()  # a peaked softmax
    target = targets((rows,), vocab, device, seed=1, ignored=ignored, ignore_index=kwargs.get("ignore_index", -100))
    loss = fo.fused_cross_entropy(logits, target, reduction=reduction, **kwargs)
    l64 = as64(logits)
    expected = reference(l64, target, reduction=reduction, **kwargs)
    assert loss.dtype == dtype and loss.shape == expected.shape
    assert_close(loss, expected, dtype)
    dloss = incoming(loss)
    loss.backward(dloss)
    expected.backward(dloss.double())
    assert_close(logits.grad, l64.grad, dtype)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_masked_classes(label_smoothing, dtype, device):
    # -inf logits (classes masked out): a finite loss and a zero gradient
    # there without smoothing; with smoothing, torch's infinite loss
    logits = random((9, 300), dtype, device, seed=5) * 4
    logits[:, 7::5] = float("-inf")
    logits.requires_grad_()
    target = targets((9,), 300, device, seed=6) // 5 * 5  # never a masked class
    loss = fo.fused_cross_entropy(logits, target, reduction="none", label_smoothing=label_smoothing)
    l64 = as64(logits)
    expected = reference(l64, target, reduction="none", label_smoothing=label_smoothing)
    assert_close(loss, expected, dtype)
    if label_smoothing == 0.0:
        assert loss.isfinite().all()
        loss.sum().backward()
        expected.sum().backward()
        assert_close(logits.grad, l64.grad, dtype)
        assert torch.equal(logits.grad[:, 7::5], torch.zeros_like(logits.grad[:, 7::5]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_3d_strided_logits_and_target(reduction, device):
    # [B, T, V] logits read in place from a slice of a wider tensor (a row
    # stride), a transposed target
    wide = random((3, 4, 61), torch.float32, device, seed=2)
    logits = wide[..., :53].requires_grad_()
    target = targets((4, 3), 53, device, seed=3, ignored=True).t()
    loss = fo.fused_cross_entropy(logits, target, reduction=reduction, label_smoothing=0.1)
    l64 = as64(logits)
    expected = reference(l64, target, reduction=reduction, label_smoothing=0.1)
    assert_close(loss, expected, torch.float32)
    dloss = incoming(loss)
    loss.backward(dloss)
    expected.backward(dloss.double())
    assert logits.grad.shape == logits.shape
    assert_close(logits.grad, l64.grad, torch.float32)


def test_unbatched_logits(device):
    logits = leaf((11,), torch.float64, device, seed=4)
    target = torch.tensor(5, device=device)
    for reduction in REDUCTIONS:
        loss = fo.fused_cross_entropy(logits, target, reduction=reduction)
        expected = F.cross_entropy(logits.detach(), target, reduction=reduction)
        assert loss.shape == ()
        assert_close(loss, expected, torch.float64)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_every_target_ignored(reduction, label_smoothing, device):
    # torch: a mean over no targets is NaN (0 / 0), every gradient 0
    logits = leaf((4, 9), torch.float32, device, seed=5)
    target = torch.full((4,), -100, device=device)
    loss = fo.fused_cross_entropy(logits, target, reduction=reduction, label_smoothing=label_smoothing)
    l64 = as64(logits)
    expected = reference(l64, target, reduction=reduction, label_smoothing=label_smoothing)
    torch.testing.assert_close(loss.double(), expected.detach(), equal_nan=True)
    loss.backward(torch.ones_like(loss))
    expected.backward(torch.ones_like(expected))
    assert torch.equal(l64.grad, torch.zeros_like(l64.grad))
    assert torch.equal(logits.grad, torch.zeros_like(logits.grad))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_no_rows(reduction, device):
    logits = leaf((0, 9), torch.float32, device, seed=6)
    target = torch.zeros(0, dtype=torch.int64, device=device)
    loss = fo.fused_cross_entropy(logits, target, reduction=reduction)
    expected = F.cross_entropy(logits.detach(), target, reduction=reduction)
    torch.testing.assert_close(loss, expected, equal_nan=True)
    loss.sum().backward()
    assert logits.grad.shape == (0, 9)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_reduced_over_more_rows_than_a_block_of_threads(reduction, device):
    # the library's count and total take one block of 1024 threads, each
    # over every 1024th row: 2500 rows leave some threads three
    logits = leaf((2500, 7), torch.float32, device, seed=11)
    target = targets((2500,), 7, device, seed=12, ignored=True)
    loss = fo.fused_cross_entropy(logits, target, reduction=reduction)
    l64 = as64(logits)
    expected = reference(l64, target, reduction=reduction)
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-6, atol=0)
    loss.backward()
    expected.backward()
    torch.testing.assert_close(logits.grad.double(), l64.grad, rtol=1e-5, atol=1e-9)


def test_gradient_accumulation(device):
    # two micro-batches accumulate into .grad, each loss scaled by 1/2
    logits = [leaf((6, 40), torch.bfloat16, device, seed=s) for s in (7, 8)]
    weight = leaf((6, 40), torch.bfloat16, device, seed=9)
    target = targets((6,), 40, device, seed=10, ignored=True)
    for x in logits:
        (fo.fused_cross_entropy(x * weight, target) / 2).backward()
    w64 = weight.detach().double().requires_grad_()
    expected = sum(reference(x.detach().double() * w64, target) / 2 for x in logits)
    expected.backward()
    torch.testing.assert_close(weight.grad.double(), w64.grad, atol=3e-2, rtol=3e-2)


def test_scaled_backward_of_more_elements_than_a_wave_of_blocks(device):
    # a scale of one element walks the gradient with a grid of at most one
    # wave (132 SMs x 8 blocks x 2048 elements on an H100): more elements
    # than that, and a scale that is not 1
    logits = leaf((1400, 2048), torch.bfloat16, device, seed=30)
    target = targets((1400,), 2048, device, seed=31, ignored=True)
    (fo.fused_cross_entropy(logits, target) * 0.375).backward()
    x64 = logits.detach().double().requires_grad_()
    (reference(x64, target) * 0.375).backward()
    torch.testing.assert_close(logits.grad.double(), x64.grad, atol=2e-6, rtol=1e-2)


def test_inference_saves_nothing(device):
    logits = leaf((5, 30), torch.float32, device, seed=11)
    target = targets((5,), 30, device, seed=12)
    with torch.no_grad():
        loss = fo.fused_cross_entropy(logits, target, softcap=4.0)
    assert loss.grad_fn is None
    assert_close(loss, reference(logits.detach(), target, softcap=4.0), torch.float32)
    loss = fo.fused_cross_entropy(logits.detach(), target, reduction="none")
    assert loss.grad_fn is None
    assert_close(loss, reference(logits.detach(), target, reduction="none"), torch.float32)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_second_backward_raises(reduction, device):
    # backward scales the saved gradient in place: a second pass through
    # the same graph must refuse, not return a gradient scaled twice
    logits = leaf((4, 10), torch.float32, device, seed=13)
    loss = fo.fused_cross_entropy(logits, targets((4,), 10, device), reduction=reduction).sum() * 0.5
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="fused_cross_entropy: backward through this loss ran a second time"):
        loss.backward()


def test_returns_a_new_gradient_and_keeps_logits(device):
    logits = leaf((4, 10), torch.float32, device, seed=14)
    before = logits.detach().clone()
    (grad,) = torch.autograd.grad(fo.fused_cross_entropy(logits, targets((4,), 10, device)), logits)
    assert torch.equal(logits.detach(), before)
    assert grad.data_ptr() != logits.data_ptr()


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_saved_tensor_hooks_see_what_backward_uses(reduction, device):
    # hooks that pack each saved tensor into a copy: backward scales the copy
    logits = leaf((5, 12), torch.float32, device, seed=15)
    x, weight = leaf((5, 6), torch.float32, device, seed=16), leaf((12, 6), torch.float32, device, seed=17)
    target = targets((5,), 12, device, seed=18, ignored=True)

    def gradients():
        loss = fo.fused_cross_entropy(logits, target, reduction=reduction) + fo.fused_linear_cross_entropy(
            x, weight, target, reduction=reduction
        )
        return torch.autograd.grad(loss, (logits, x, weight), incoming(loss))

    expected = gradients()
    packed = []

    def pack(tensor):
        packed.append(tensor)
        return tensor.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda copy: copy):
        actual = gradients()
    assert packed
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


# fused_linear_cross_entropy -------------------------------------------------

# products of hidden-size sums: looser than one rounding of the dtype
LINEAR_TOLERANCES = {
    torch.float32: dict(atol=1e-4, rtol=1e-4),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=6e-2, rtol=6e-2),
    torch.float64: dict(atol=1e-10, rtol=1e-10),
}


def linear_reference(x, weight, bias, target, **kwargs):
    return reference(F.linear(x, weight, bias), target, **kwargs)


def assert_linear_close(actual, expected, dtype, rows=1):
    """A gradient summed over rows (weight, bias) has errors that grow
    like sqrt(rows)."""
    tolerance = LINEAR_TOLERANCES[dtype]
    scale = max(1, rows) ** 0.5
    torch.testing.assert_close(
        actual.cpu().double(), expected.cpu().double(), atol=tolerance["atol"] * scale, rtol=tolerance["rtol"]
    )


@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_linear_values_and_gradients(with_bias, reduction, options, dtype, device):
    # 37 rows: chunks of 2 (fp32) or 4 (16-bit) rows, the last one short
    ignored, kwargs = split(options)
    rows, hidden, vocab = 37, 16, 131
    x = leaf((rows, hidden), dtype, device, seed=20)
    weight = leaf((vocab, hidden), dtype, device, seed=21)
    bias = leaf((vocab,), dtype, device, seed=22) if with_bias else None
    target = targets((rows,), vocab, device, seed=23, ignored=ignored, ignore_index=kwargs.get("ignore_index", -100))
    loss = fo.fused_linear_cross_entropy(x, weight, target, linear_bias=bias, reduction=reduction, **kwargs)
    x64, w64, b64 = as64(x), as64(weight), as64(bias)
    expected = linear_reference(x64, w64, b64, target, reduction=reduction, **kwargs)
    assert loss.dtype == dtype and loss.shape == expected.shape
    assert_linear_close(loss, expected, dtype, rows if reduction == "sum" else 1)
    dloss = incoming(loss)
    loss.backward(dloss)
    expected.backward(dloss.double())
    assert_linear_close(x.grad, x64.grad, dtype)
    assert_linear_close(weight.grad, w64.grad, dtype, rows)
    if with_bias:
        assert_linear_close(bias.grad, b64.grad, dtype, rows)


@pytest.mark.parametrize("vocab", VOCABS)
def test_linear_3d_input_and_vocab_sizes(vocab, device):
    x = leaf((2, 3, 24), torch.float32, device, seed=24)
    weight = leaf((vocab, 24), torch.float32, device, seed=25)
    target = targets((2, 3), vocab, device, seed=26, ignored=True)
    loss = fo.fused_linear_cross_entropy(x, weight, target, label_smoothing=0.05, softcap=20.0)
    x64, w64 = as64(x), as64(weight)
    expected = linear_reference(x64, w64, None, target, label_smoothing=0.05, softcap=20.0)
    assert_linear_close(loss, expected, torch.float32)
    (loss * 3).backward()
    (expected * 3).backward()
    assert x.grad.shape == x.shape
    assert_linear_close(x.grad, x64.grad, torch.float32)
    assert_linear_close(weight.grad, w64.grad, torch.float32, 6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("wanted", ["input", "weight", "bias", "weight+bias"])
def test_linear_only_wanted_gradients(wanted, reduction, device):
    x = random((9, 12), torch.float64, device, seed=27).requires_grad_("input" in wanted)
    weight = random((20, 12), torch.float64, device, seed=28).requires_grad_("weight" in wanted)
    bias = random((20,), torch.float64, device, seed=29).requires_grad_("bias" in wanted)
    target = targets((9,), 20, device, seed=30, ignored=True)
    loss = fo.fused_linear_cross_entropy(x, weight, target, linear_bias=bias, reduction=reduction)
    loss.backward(incoming(loss))
    x64, w64, b64 = as64(x), as64(weight), as64(bias)
    expected = linear_reference(x64, w64, b64, target, reduction=reduction)
    expected.backward(incoming(expected))
    for tensor, reference64, name in ((x, x64, "input"), (weight, w64, "weight"), (bias, b64, "bias")):
        if name in wanted:
            assert_close(tensor.grad, reference64.grad, torch.float64)
        else:
            assert tensor.grad is None


def test_linear_all_ignored_and_no_rows(device):
    x = leaf((3, 8), torch.float32, device, seed=31)
    weight = leaf((5, 8), torch.float32, device, seed=32)
    loss = fo.fused_linear_cross_entropy(x, weight, torch.full((3,), -100, device=device))
    assert torch.isnan(loss)
    loss.backward()
    assert not x.grad.any() and not weight.grad.any()
    x = leaf((0, 8), torch.float32, device, seed=33)
    bias = leaf((5,), torch.float32, device, seed=34)
    weight.grad = None
    loss = fo.fused_linear_cross_entropy(
        x, weight, torch.zeros(0, dtype=torch.int64, device=device), linear_bias=bias, reduction="sum"
    )
    loss.backward()
    assert loss.item() == 0 and not weight.grad.any() and not bias.grad.any()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_second_backward_raises(reduction, device):
    x = leaf((4, 8), torch.float32, device, seed=35)
    weight = leaf((10, 8), torch.float32, device, seed=36)
    loss = fo.fused_linear_cross_entropy(x, weight, targets((4,), 10, device), reduction=reduction)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="fused_linear_cross_entropy: backward through this loss ran"):
        loss.backward()


def test_linear_none_backward_twice_recomputes(device):
    # reduction none saves no gradient: backward computes it again, so a
    # second backward is as right as the first
    x = leaf((6, 8), torch.float64, device, seed=37)
    weight = leaf((10, 8), torch.float64, device, seed=38)
    loss = fo.fused_linear_cross_entropy(x, weight, targets((6,), 10, device, ignored=True), reduction="none")
    dloss = incoming(loss)
    first = torch.autograd.grad(loss, (x, weight), dloss, retain_graph=True)
    second = torch.autograd.grad(loss, (x, weight), dloss)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_linear_inference(device):
    x = random((10, 8), torch.bfloat16, device, seed=39)
    weight = random((30, 8), torch.bfloat16, device, seed=40)
    target = targets((10,), 30, device, seed=41, ignored=True)
    for reduction in REDUCTIONS:
        loss = fo.fused_linear_cross_entropy(x, weight, target, reduction=reduction)
        assert loss.grad_fn is None and loss.dtype == torch.bfloat16
        assert_linear_close(
            loss,
            linear_reference(x.double(), weight.double(), None, target, reduction=reduction),
            torch.bfloat16,
            10 if reduction == "sum" else 1,
        )


def test_chunks_are_a_sixteenth_of_fp32_logits_and_at_most_twice_the_input():
    # a chunk's logits take at most 1/16 of the bytes of all rows' fp32
    # logits and twice the input's bytes, or one row where even that is
    # more; at least half of that allowance, in whole 128-row tiles above 256
    for rows in (1, 3, 16, 17, 100, 4096, 8192, 65537):
        for hidden, vocab in ((8, 50), (4096, 32000), (4096, 128256), (2048, 256000)):
            for element_size in (2, 4, 8):
                step = linear_cross_entropy.default_chunk_rows(rows, hidden, vocab, element_size)
                allowed = min(rows * vocab * 4 / 16, 2 * rows * hidden * element_size) / (vocab * element_size)
                assert step == 1 or step <= allowed
                assert step >= min(allowed / 2, 1)
                assert step < 256 or step % 128 == 0
    assert linear_cross_entropy.default_chunk_rows(8192, 4096, 128256, 2) == 512
    assert linear_cross_entropy.default_chunk_rows(8192, 4096, 32000, 2) == 1024


class LiveLogits(TorchDispatchMode):
    """Watches the logits torch's GEMMs make (outputs vocab wide): the most
    alive at once, and the most rows of one."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.alive, self.most_alive, self.most_rows = vocab, [], 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default) and out.shape[-1] == self.vocab:
            self.alive.append(weakref.ref(out))
            self.most_rows = max(self.most_rows, out.shape[0])
        self.most_alive = max(self.most_alive, sum(ref() is not None for ref in self.alive))
        return out


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_linear_holds_one_chunk_of_logits_at_a_time(reduction):
    # what the CUDA memory test measures, seen on any device: 160 fp32 rows
    # go in chunks of 10, one chunk's logits alive at a time
    x, weight = leaf((160, 8), torch.float32, "cpu", seed=42), leaf((50, 8), torch.float32, "cpu", seed=43)
    target = targets((160,), 50, "cpu", seed=44)
    watch = LiveLogits(50)
    with watch:
        loss = fo.fused_linear_cross_entropy(x, weight, target, reduction=reduction)
        loss.backward(torch.ones_like(loss))
    assert watch.most_rows == 10 and watch.most_alive == 1


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_linear_chunk_rows_sets_the_chunks_and_keeps_the_values(reduction, compiled):
    x, weight = leaf((160, 8), torch.float32, "cpu", seed=48), leaf((50, 8), torch.float32, "cpu", seed=49)
    bias = leaf((50,), torch.float32, "cpu", seed=50)
    target = targets((160,), 50, "cpu", seed=51, ignored=True)

    def loss_of(x, weight, bias):
        return fo.fused_linear_cross_entropy(x, weight, target, linear_bias=bias, reduction=reduction, chunk_rows=64)

    def run(loss_of):
        loss = loss_of(x, weight, bias)
        return (loss, *torch.autograd.grad(loss, (x, weight, bias), incoming(loss)))

    if compiled:
        actual = run(torch.compile(loss_of, backend="aot_eager", fullgraph=True))
    else:
        watch = LiveLogits(50)
        with watch:
            actual = run(loss_of)
        assert watch.most_rows == 64 and watch.most_alive == 1
    exact = [t.detach().double().requires_grad_() for t in (x, weight, bias)]
    expected = linear_reference(exact[0], exact[1], exact[2], target, reduction=reduction)
    expected_grads = torch.autograd.grad(expected, exact, incoming(actual[0]).double())
    for a, e, rows in zip(actual, (expected, *expected_grads), (1, 1, 160, 160)):
        assert_linear_close(a, e, torch.float32, rows)


def test_linear_chunk_rows_must_be_a_positive_int():
    x, weight, target = torch.randn(4, 8), torch.randn(30, 8), torch.zeros(4, dtype=torch.long)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=f"chunk_rows={bad!r} must be None or a positive int"):
            fo.fused_linear_cross_entropy(x, weight, target, chunk_rows=bad)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_linear_under_autocast_keeps_the_input_dtype(reduction, device):
    # autocast would make bf16 logits of fp32 input; the loss reads them as
    # input's dtype, so the GEMMs inside run as outside autocast
    x, weight = leaf((20, 16), torch.float32, device, seed=45), leaf((300, 16), torch.float32, device, seed=46)
    target = targets((20,), 300, device, seed=47, ignored=True)

    def run():
        loss = fo.fused_linear_cross_entropy(x, weight, target, reduction=reduction)
        return (loss, *torch.autograd.grad(loss, (x, weight), incoming(loss)))

    expected = run()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        actual = run()
    for a, e in zip(actual, expected):
        assert a.dtype == torch.float32 and torch.equal(a, e)


# modules --------------------------------------------------------------------


def test_modules(device):
    logits = leaf((6, 17), torch.float32, device, seed=42)
    target = targets((6,), 17, device, seed=43, ignored=True)
    ours = fo.FusedCrossEntropyLoss(reduction="sum", label_smoothing=0.1)
    theirs = torch.nn.CrossEntropyLoss(reduction="sum", label_smoothing=0.1)
    assert_close(ours(logits, target), theirs(logits.detach().double(), target), torch.float32)
    assert "label_smoothing=0.1" in repr(ours) and "softcap=None" in repr(ours)
    x = leaf((6, 5), torch.float32, device, seed=44)
    weight, bias = leaf((17, 5), torch.float32, device, seed=45), leaf((17,), torch.float32, device, seed=46)
    target = targets((6,), 17, device, seed=43, ignored=True, ignore_index=2)
    linear_loss = fo.FusedLinearCrossEntropyLoss(ignore_index=2, softcap=5.0)
    expected = linear_reference(
        x.detach().double(), weight.detach().double(), bias.detach().double(), target, ignore_index=2, softcap=5.0
    )
    assert_linear_close(linear_loss(x, weight, target, bias), expected, torch.float32)


# determinism ----------------------------------------------------------------


def test_determinism(device):
    def run():
        logits = leaf((33, 1000), torch.bfloat16, device, seed=47)
        x = leaf((33, 32), torch.bfloat16, device, seed=48)
        weight = leaf((1000, 32), torch.bfloat16, device, seed=49)
        target = targets((33,), 1000, device, seed=50, ignored=True)
        a = fo.fused_cross_entropy(logits, target, label_smoothing=0.1, softcap=30.0)
        b = fo.fused_linear_cross_entropy(x, weight, target, reduction="sum")
        (a + b).backward()
        return a, b, logits.grad, x.grad, weight.grad

    for first, second in zip(run(), run()):
        assert torch.equal(first, second)


# errors ---------------------------------------------------------------------


def _logits():
    return torch.ones(3, 5)


@pytest.mark.parametrize(
    "call, exception, words",
    [
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 7, 2])),
            ValueError,
            ["fo_cross_entropy", "target[1]=7", "vocab=5"],
        ),
        (lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, -1, 2])), ValueError, ["target[1]=-1"]),
        (
            lambda: fo.fused_cross_entropy(_logits().requires_grad_(), torch.tensor([0, 1, 5])),
            ValueError,
            ["target[2]=5"],
        ),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2, 3], dtype=torch.int32)),
            TypeError,
            ["fused_cross_entropy", "target", "torch.int32", "int64"],
        ),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2])),
            ValueError,
            ["fused_cross_entropy", "(2,)", "(3,)"],
        ),
        (lambda: fo.fused_cross_entropy(_logits(), [1, 2, 3]), TypeError, ["target", "list"]),
        (lambda: fo.fused_cross_entropy(torch.tensor(1.0), torch.tensor(0)), ValueError, ["logits is 0-d"]),
        (lambda: fo.fused_cross_entropy(_logits().long(), torch.tensor([1, 2, 3])), TypeError, ["logits", "int64"]),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2, 3]), reduction="avg"),
            ValueError,
            ["reduction='avg'"],
        ),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2, 3]), ignore_index=1.0),
            TypeError,
            ["ignore_index", "float"],
        ),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2, 3]), label_smoothing=1.5),
            ValueError,
            ["fo_cross_entropy", "label_smoothing=1.5"],
        ),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2, 3]), softcap=-1.0),
            ValueError,
            ["fo_cross_entropy", "softcap=-1"],
        ),
        (
            lambda: fo.fused_cross_entropy(_logits(), torch.tensor([1, 2, 3]), softcap="30"),
            TypeError,
            ["softcap", "str"],
        ),
        (lambda: fo.fused_cross_entropy(torch.ones(3, 0), torch.tensor([1, 2, 3])), ValueError, ["vocab=0"]),
        (
            lambda: fo.fused_linear_cross_entropy(torch.ones(3, 4), torch.ones(5, 6), torch.tensor([1, 2, 3])),
            ValueError,
            ["fused_linear_cross_entropy", "linear_weight", "(5, 6)"],
        ),
        (
            lambda: fo.fused_linear_cross_entropy(torch.ones(3, 4), torch.ones(5, 4).double(), torch.tensor([1, 2, 3])),
            TypeError,
            ["linear_weight", "torch.float64"],
        ),
        (
            lambda: fo.fused_linear_cross_entropy(
                torch.ones(3, 4), torch.ones(5, 4), torch.tensor([1, 2, 3]), linear_bias=torch.ones(4)
            ),
            ValueError,
            ["linear_bias", "(4,)"],
        ),
        (
            lambda: fo.fused_linear_cross_entropy(torch.ones(3, 4), torch.ones(5, 4), torch.tensor([1, 9, 3])),
            ValueError,
            ["target[1]=9"],
        ),  # one row a chunk: named by its row in the call
        (
            lambda: fo.fused_linear_cross_entropy(
                torch.ones(40, 4), torch.ones(5, 4), torch.tensor([1] * 37 + [-2, 1, 1])
            ),
            ValueError,
            ["fo_cross_entropy", "target[37]=-2"],
        ),
        (
            lambda: fo.fused_linear_cross_entropy(torch.ones(3, 4), torch.ones(5, 4), torch.tensor([[1, 2, 3]])),
            ValueError,
            ["target", "(1, 3)", "(3,)"],
        ),
    ],
)
def test_bad_input(call, exception, words):
    with pytest.raises(exception) as info:
        call()
    for word in words:
        assert word in str(info.value)


def _library_call(struct_size=None, **fields):
    """fo_cross_entropy of 3 x 5 fp32 CPU logits with fields set; loss, total
    and the rest are kept alive with it."""
    logits, target = torch.randn(3, 5), torch.tensor([1, -100, 4])
    loss, total = torch.full((3,), 7.0), torch.full((), 7.0)
    a = cross_entropy.ffi.new(
        cross_entropy.CROSS_ENTROPY, cross_entropy.cross_entropy_struct(logits, 3, 5, 5, -100, 0.0, 0.0, None)[0]
    )
    a.loss, a.logits, a.target = loss.data_ptr(), logits.data_ptr(), target.data_ptr()
    for name, value in fields.items():
        setattr(a, name, value if name != "total" else total.data_ptr())
    if struct_size is not None:
        a.struct_size = struct_size
    status = cross_entropy.lib.fo_cross_entropy(a)
    return status, logits, target, loss, total


@pytest.mark.parametrize(
    "fields, words",
    [
        (dict(reduction=3), ["fo_cross_entropy", "reduction=3"]),
        (dict(reduction=cross_entropy.lib.FO_REDUCTION_NONE, total=True), ["total=0x", "FO_REDUCTION_NONE"]),
        (
            dict(reduction=cross_entropy.lib.FO_REDUCTION_MEAN, total=True, scale=16),
            ["scale=0x10", "FO_REDUCTION_MEAN"],
        ),
        (dict(reduction=cross_entropy.lib.FO_REDUCTION_SUM), ["total is a null address"]),
    ],
)
def test_library_refuses_a_bad_reduction(fields, words):
    with pytest.raises(ValueError) as info:
        check(_library_call(**fields)[0])
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_library_first_struct_version_reduces_nothing():
    # a caller of the first version (its struct ends at softcap, its 0 in
    # reduction was `reserved`) gets the rows' losses alone: the total past
    # its struct_size reads as 0, and is neither refused nor written
    first = cross_entropy.ffi.offsetof("fo_cross_entropy_args", "total")
    status, logits, target, loss, total = _library_call(first, total=True)
    assert status == 0
    torch.testing.assert_close(loss.double(), reference(logits, target, reduction="none"))
    assert total.item() == 7.0


@requires_gpu()
def test_device_mismatch():
    with pytest.raises(ValueError, match="target is on cpu but logits is on cuda:0"):
        fo.fused_cross_entropy(torch.ones(3, 5, device="cuda"), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="linear_weight is on cpu but input is on cuda:0"):
        fo.fused_linear_cross_entropy(
            torch.ones(3, 4, device="cuda"), torch.ones(5, 4), torch.tensor([1, 2, 3], device="cuda")
        )


# torch.compile ----------------------------------------------------------------

needs_compile = pytest.mark.skipif(not _core.AVAILABLE, reason="torch.compile support needs torch >= 2.4")


def _compiled_and_eager(function, inputs, dloss_seed=60):
    torch._dynamo.reset()
    compiled = torch.compile(function, fullgraph=True)
    results = []
    for f in (function, compiled):
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in inputs]
        loss = f(*leaves)
        grads = torch.autograd.grad(loss, [t for t in leaves if t.requires_grad], incoming(loss, dloss_seed))
        results.append((loss, grads))
    return results


@needs_compile
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_compile_matches_eager(reduction, device):
    logits = leaf((2, 5, 40), torch.float32, device, seed=61)
    target = targets((2, 5), 40, device, seed=62, ignored=True, ignore_index=7)

    def loss(logits):
        return fo.fused_cross_entropy(
            logits, target, ignore_index=7, label_smoothing=0.1, softcap=10.0, reduction=reduction
        )

    (eager, eager_grads), (compiled, compiled_grads) = _compiled_and_eager(loss, [logits])
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(compiled_grads, eager_grads)
    assert_close(
        compiled,
        reference(logits.detach(), target, ignore_index=7, label_smoothing=0.1, softcap=10.0, reduction=reduction),
        torch.float32,
    )


@needs_compile
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_compile_linear_matches_eager(with_bias, reduction, device):
    x = leaf((2, 9, 16), torch.float32, device, seed=63)
    weight = leaf((50, 16), torch.float32, device, seed=64)
    bias = leaf((50,), torch.float32, device, seed=65) if with_bias else None
    target = targets((2, 9), 50, device, seed=66, ignored=True)

    def loss(x, weight, *bias):
        return fo.fused_linear_cross_entropy(
            x, weight, target, linear_bias=bias[0] if bias else None, reduction=reduction, label_smoothing=0.05
        )

    inputs = [x, weight] + ([bias] if with_bias else [])
    (eager, eager_grads), (compiled, compiled_grads) = _compiled_and_eager(loss, inputs)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(compiled_grads, eager_grads)


@needs_compile
def test_compile_linear_without_input_grad(device):
    x = random((6, 8), torch.float32, device, seed=67)
    weight = leaf((12, 8), torch.float32, device, seed=68)
    target = targets((6,), 12, device, seed=69)
    compiled = torch.compile(lambda x, w: fo.fused_linear_cross_entropy(x, w, target), fullgraph=True)
    torch._dynamo.reset()
    (grad,) = torch.autograd.grad(compiled(x, weight), weight)
    (expected,) = torch.autograd.grad(fo.fused_linear_cross_entropy(x, weight, target), weight)
    torch.testing.assert_close(grad, expected)


@needs_compile
@pytest.mark.parametrize("with_grad", [True, False])
def test_opcheck(with_grad, device):
    logits = leaf((5, 24), torch.float32, device, seed=70).requires_grad_(with_grad)
    x = leaf((5, 8), torch.float32, device, seed=71).requires_grad_(with_grad)
    weight = leaf((24, 8), torch.float32, device, seed=72).requires_grad_(with_grad)
    bias = leaf((24,), torch.float32, device, seed=73).requires_grad_(with_grad)
    target = targets((5,), 24, device, seed=74, ignored=True)
    ops = torch.ops.fused_ops_py
    g = with_grad
    for reduction in REDUCTIONS:
        torch.library.opcheck(ops.cross_entropy, (logits, target, -100, 0.1, 5.0, reduction, g))
        torch.library.opcheck(
            ops.linear_cross_entropy, (x, weight, bias, target, -100, 0.0, 0.0, reduction, 0, g, g, g)
        )
        torch.library.opcheck(
            ops.linear_cross_entropy, (x, weight, None, target.clamp(min=0), 3, 0.1, 0.0, reduction, 2, g, g, False)
        )
    dloss = random((5,), torch.float32, device, seed=75)
    torch.library.opcheck(
        ops.linear_cross_entropy_backward,
        (dloss, x.detach(), weight.detach(), bias.detach(), target, -100, 0.0, 0.0, 2, True, True, True),
    )


# CUDA -------------------------------------------------------------------------


@requires_gpu()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_graph_capture_and_replay(dtype):
    # forward and backward with the mean's 1 / count on the device: no
    # host synchronization, so the whole step captures
    logits = leaf((64, 1000), dtype, "cuda", seed=80)
    x, weight = leaf((64, 32), dtype, "cuda", seed=81), leaf((1000, 32), dtype, "cuda", seed=82)
    target = targets((64,), 1000, "cuda", seed=83, ignored=True)

    def step():
        a = fo.fused_cross_entropy(logits, target, label_smoothing=0.1)
        b = fo.fused_linear_cross_entropy(x, weight, target, reduction="none")
        loss = a + (b * 0.5).sum()
        return (loss, *torch.autograd.grad(loss, [logits, x, weight]))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up on a side stream, as torch's docs ask
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():  # new inputs, then replay
        logits.copy_(random((64, 1000), dtype, "cuda", seed=84))
        target.copy_(targets((64,), 1000, "cuda", seed=85, ignored=False))
    expected = step()
    graph.replay()
    torch.cuda.synchronize()
    for a, e in zip(captured, expected):
        torch.testing.assert_close(a, e)


@requires_gpu()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_linear_memory_is_a_fraction_of_the_logits(dtype):
    rows, hidden, vocab = 4096, 512, 32000
    x = leaf((rows, hidden), dtype, "cuda", seed=86)
    weight = leaf((vocab, hidden), dtype, "cuda", seed=87)
    target = targets((rows,), vocab, "cuda", seed=88, ignored=True)

    def run(reduction):
        loss = fo.fused_linear_cross_entropy(x, weight, target, reduction=reduction)
        return torch.autograd.grad(loss, [x, weight], torch.ones_like(loss))

    for reduction in ("mean", "none"):
        run(reduction)  # warm-up: cuBLAS's workspace
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        grads = run(reduction)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - before - sum(g.numel() * g.element_size() for g in grads)
        assert extra < rows * vocab * 4 / 8, (reduction, extra)
        del grads


@requires_gpu()
@pytest.mark.parametrize(
    "vocab, dtype",
    [
        (32000, torch.bfloat16),
        (32000, torch.float32),
        (128256, torch.bfloat16),
        (128256, torch.float32),
        (256000, torch.bfloat16),
        (256000, torch.float32),
    ],
    ids=str,
)
def test_many_rows_a_block_at_model_vocabularies(vocab, dtype):
    # more rows than blocks resident at once, so that a block (a cluster of
    # 1, 2, 4, 8 or 16 at these sizes) copies its next row while it writes one;
    # every third target ignored, and the gradient in place (the linear
    # loss's chunks) as well as beside the logits
    rows = 1500
    logits = random((rows, vocab), dtype, "cuda", seed=vocab) * 4
    target = targets((rows,), vocab, "cuda", seed=2, ignored=True)
    expected = logits.float().clone().requires_grad_()  # torch in fp32: the reference
    loss = F.cross_entropy(expected, target, reduction="sum")
    loss.backward()
    expected_grad = expected.grad.to(dtype)
    got = logits.clone().requires_grad_()
    fused = fo.fused_cross_entropy(got, target, reduction="sum")
    fused.backward()
    loss_rtol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(fused.float(), loss, rtol=loss_rtol, atol=0)
    assert_close(got.grad, expected_grad, dtype)
    in_place = logits.clone()
    losses = in_place.new_empty(rows, dtype=torch.float32)
    template = cross_entropy.cross_entropy_struct(in_place, rows, vocab, vocab, -100, 0.0, 0.0, None)
    a = cross_entropy.ffi.new(cross_entropy.CROSS_ENTROPY, template[0])
    a.loss, a.target = losses.data_ptr(), target.data_ptr()
    a.logits = a.dlogits = in_place.data_ptr()
    cross_entropy.call_cross_entropy(a)
    torch.testing.assert_close(losses.sum(), loss, rtol=loss_rtol, atol=0)
    assert_close(in_place, expected_grad, dtype)


@requires_gpu()
def test_gpu_matches_cpu():
    logits = random((16, 32003), torch.float32, "cpu", seed=89)
    target = targets((16,), 32003, "cpu", seed=90, ignored=True)
    for reduction in REDUCTIONS:
        cpu = fo.fused_cross_entropy(logits, target, reduction=reduction, label_smoothing=0.1, softcap=30.0)
        gpu = fo.fused_cross_entropy(
            logits.cuda(), target.cuda(), reduction=reduction, label_smoothing=0.1, softcap=30.0
        )
        torch.testing.assert_close(gpu.cpu(), cpu, **TOLERANCES[torch.float32])
