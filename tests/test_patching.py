"""fused_ops_py.patch on torch modules and small, randomly initialised
Hugging Face models (built from a config: no downloads)."""

import copy

import pytest
import torch

import fused_ops_py as fo
from conftest import random


def test_patch_torch_modules_keeps_parameters(device):
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Sequential(torch.nn.LayerNorm(16, bias=False)),
        torch.nn.Linear(16, 16),
    ).to(device)
    if hasattr(torch.nn, "RMSNorm"):
        model.append(torch.nn.RMSNorm(16, eps=1e-6).to(device))
    weights = [model[1].weight, model[2][0].weight]
    reference = copy.deepcopy(model)
    x = random((4, 16), torch.float32, device, seed=1)
    assert fo.patch(model) == (3 if hasattr(torch.nn, "RMSNorm") else 2)
    assert isinstance(model[1], fo.FusedLayerNorm) and isinstance(model[2][0], fo.FusedLayerNorm)
    assert model[1].weight is weights[0] and model[2][0].weight is weights[1]  # the same Parameters
    assert model[2][0].bias is None
    torch.testing.assert_close(model(x), reference(x))
    assert fo.patch(model) == 0  # nothing left to replace


def hf_models():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    llama = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    # no dropout: the twins must see the same computation
    gpt2 = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return [
        ("llama", transformers.LlamaForCausalLM, llama, 2 * 2 + 1),
        ("gpt2", transformers.GPT2LMHeadModel, gpt2, 2 * 2 + 1),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=["llama", "gpt2"])
def test_patched_hf_model_matches_and_trains(index, device):
    name, model_class, config, expected_count = hf_models()[index]
    torch.manual_seed(0)
    original = model_class(config).to(device)
    patched = copy.deepcopy(original)
    assert fo.patch(patched) == expected_count
    kinds = {type(m).__name__ for m in patched.modules()}
    assert not any(k.endswith("RMSNorm") and not k.startswith("Fused") for k in kinds)
    assert "LayerNorm" not in kinds

    tokens = torch.randint(0, config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1)).to(device)
    out_original = original(input_ids=tokens, labels=tokens)
    out_patched = patched(input_ids=tokens, labels=tokens)
    torch.testing.assert_close(out_patched.logits, out_original.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out_patched.loss, out_original.loss, atol=1e-5, rtol=1e-5)
    out_original.loss.backward()
    out_patched.loss.backward()
    for (n, a), (_, b) in zip(patched.named_parameters(), original.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-3, msg=lambda m: f"{name} {n}: {m}")

    # a few optimizer steps: the loss falls, and the twins stay together
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (original, patched)]
    losses = {0: [], 1: []}
    for _ in range(3):
        for i, (model, optimizer) in enumerate(zip((original, patched), optimizers)):
            optimizer.step()
            optimizer.zero_grad()
            loss = model(input_ids=tokens, labels=tokens).loss
            loss.backward()
            losses[i].append(loss.item())
    assert losses[1][-1] < out_patched.loss.item()
    for a, b in zip(losses[0], losses[1]):
        assert abs(a - b) <= 1e-4 * abs(a)
