"""fused_ops_py.patch on a tiny, randomly initialised model of every
*ForCausalLM class that the installed transformers exports (built from its
config: no downloads), in fp32 on the CPU and on a GPU when there is one:
after patching, a training step gives the same loss and gradients, and an
eval forward the same logits."""

import copy

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed")

import tiny_causal_lms as tiny  # noqa: E402  (imports transformers)

import fused_ops_py  # noqa: E402

BUILT = [name for name in tiny.CAUSAL_LM_NAMES if name not in tiny.UNBUILDABLE]


pytestmark = pytest.mark.usefixtures("restored_modeling_functions")


def train_and_eval(model, kwargs):
    """The loss and the parameters' gradients of a training step, and the
    logits of an eval forward without labels."""
    torch.manual_seed(0)
    loss = model(**kwargs).loss
    loss.backward()
    grads = {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()}
    model.eval()
    with torch.no_grad():
        logits = model(**{k: v for k, v in kwargs.items() if k != "labels"}).logits
    model.train()
    return loss.item(), grads, logits


def relative_error(actual, expected, scale):
    """max |actual - expected| over max |expected|, or over `scale` where that
    is larger: a gradient that is zero but for roundings (a path the inputs
    do not take) is measured against the model's gradients."""
    return ((actual - expected).abs().max() / max(expected.abs().max().item(), scale, 1e-30)).item()


@pytest.mark.parametrize("name", BUILT)
def test_patch_keeps_loss_gradients_and_logits(name, device):
    model = tiny.build(name).to(device)
    kwargs = {k: v.to(device) for k, v in tiny.inputs(name, model).items()}
    patched = copy.deepcopy(model)  # before the reference step: no gradients in it
    loss, grads, logits = train_and_eval(model, kwargs)  # with the original modeling functions
    count = fused_ops_py.patch(patched)
    patched.zero_grad(set_to_none=True)
    patched_loss, patched_grads, patched_logits = train_and_eval(patched, kwargs)

    assert patched_grads.keys() == grads.keys(), f"{name}: patch changed the parameters' names"
    one_sided = [n for n in grads if (grads[n] is None) != (patched_grads[n] is None)]
    scale = 1e-3 * max((g.abs().max().item() for g in grads.values() if g is not None), default=1.0)
    errors = {
        n: relative_error(patched_grads[n], g, scale) for n, g in grads.items() if g is not None and n not in one_sided
    }
    worst = max(errors, key=errors.get, default=None)
    message = (
        f"{name}: patch returned {count}; loss {patched_loss!r} patched vs {loss!r}; "
        f"worst gradient {worst} off by {errors.get(worst, 0.0):.3g} (relative to its max)"
    )
    assert not one_sided, f"{message}; gradient None on one side only: {one_sided}"
    assert abs(patched_loss - loss) <= 2e-4 * abs(loss), message
    assert errors.get(worst, 0.0) <= 2e-3, message
    torch.testing.assert_close(
        patched_logits, logits, rtol=2e-4, atol=1e-5, msg=lambda detail: f"{message}; eval logits: {detail}"
    )


def test_unbuildable_is_exactly_what_fails():
    assert set(tiny.UNBUILDABLE) <= set(tiny.CAUSAL_LM_NAMES), "UNBUILDABLE names a class transformers lacks"
    failing = {}
    for name in tiny.CAUSAL_LM_NAMES:
        try:
            model = tiny.build(name)
            with torch.no_grad():
                model(**tiny.inputs(name, model))
        except Exception as error:  # noqa: BLE001 (what fails is what is listed)
            failing[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    assert failing.keys() == tiny.UNBUILDABLE.keys(), failing
