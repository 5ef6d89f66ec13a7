"""fused_ops_py.patch on torch modules and small, randomly initialised
Hugging Face models (built from a config: no downloads)."""

import copy
import sys

import pytest
import torch
from conftest import random

import fused_ops_py as fo

pytestmark = pytest.mark.usefixtures("restored_modeling_functions")


def test_patch_torch_modules_keeps_parameters(device):
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 16),
        torch.nn.LayerNorm(16),
        torch.nn.Sequential(torch.nn.LayerNorm(16, bias=False)),
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
    """(name, model class, config, replacements patch makes): two layers, a
    vocab of 128, no dropout (the twins must see the same computation)."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    sizes = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    # per layer: norms; then the final norm, the MLPs, RoPE (one modeling
    # module) and the loss
    return [
        ("llama", transformers.LlamaForCausalLM, transformers.LlamaConfig(**sizes), 2 * 2 + 1 + 2 + 1 + 1),
        ("mistral", transformers.MistralForCausalLM, transformers.MistralConfig(**sizes), 2 * 2 + 1 + 2 + 1 + 1),
        ("qwen2", transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**sizes), 2 * 2 + 1 + 2 + 1 + 1),
        ("qwen3", transformers.Qwen3ForCausalLM, transformers.Qwen3Config(head_dim=16, **sizes), 2 * 4 + 1 + 2 + 1 + 1),
        ("gemma", transformers.GemmaForCausalLM, transformers.GemmaConfig(head_dim=16, **sizes), 2 * 2 + 1 + 2 + 1 + 1),
        (
            "gemma2",
            transformers.Gemma2ForCausalLM,
            transformers.Gemma2Config(head_dim=16, **sizes),
            2 * 4 + 1 + 2 + 1 + 1,
        ),
        (
            "gemma3",
            transformers.Gemma3ForCausalLM,
            transformers.Gemma3TextConfig(head_dim=16, **sizes),
            2 * 6 + 1 + 2 + 1 + 1,
        ),
        # partial rotary: 3/4 of each head rotated
        (
            "phi3",
            transformers.Phi3ForCausalLM,
            transformers.Phi3Config(pad_token_id=0, partial_rotary_factor=0.75, **sizes),
            2 * 2 + 1 + 2 + 1 + 1,
        ),
        (
            "gpt2",
            transformers.GPT2LMHeadModel,
            transformers.GPT2Config(
                vocab_size=128,
                n_embd=64,
                n_layer=2,
                n_head=4,
                n_positions=64,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
            ),
            2 * 2 + 1 + 1,
        ),
    ]


# the families Liger users train beyond those, built by tiny_causal_lms: (name,
# class, replacements, whether patch knows every part (strict=True passes))
TINY_FAMILIES = [
    ("mixtral", "MixtralForCausalLM", 5 + 2 + 1 + 1, True),  # norms, experts, RoPE, loss
    ("qwen2_moe", "Qwen2MoeForCausalLM", 5 + 4 + 1 + 1, True),  # experts and shared experts
    ("qwen3_moe", "Qwen3MoeForCausalLM", 9 + 2 + 1 + 1, True),  # q and k norms
    ("gpt_oss", "GptOssForCausalLM", 5 + 2 + 1 + 1, True),  # clamped experts
    ("olmo2", "Olmo2ForCausalLM", 9 + 2 + 1 + 1, True),
    ("olmo3", "Olmo3ForCausalLM", 9 + 2 + 1 + 1, True),
    ("granite", "GraniteForCausalLM", 5 + 2 + 1 + 1, True),  # logits_scaling 8 (override below)
    ("glm4", "Glm4ForCausalLM", 9 + 2 + 1 + 1, True),  # interleaved partial RoPE
    ("smollm3", "SmolLM3ForCausalLM", 5 + 2 + 1 + 1, True),
    ("cohere2", "Cohere2ForCausalLM", 3 + 2 + 1 + 1, True),  # LayerNorm, interleaved RoPE, logit_scale
    ("exaone4", "Exaone4ForCausalLM", 9 + 2 + 1 + 1, True),
    ("ministral", "MinistralForCausalLM", 5 + 2 + 1 + 1, True),
    ("llama4", "Llama4ForCausalLM", 6 + 4 + 1 + 1, True),  # L2Norm, bmm experts, complex RoPE
    ("deepseek_v3", "DeepseekV3ForCausalLM", 9 + 3 + 1 + 1, False),  # its interleave RoPE kept
]
FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt2"] + [
    family[0] for family in TINY_FAMILIES
]


def build(index):
    """(name, config, model, replacements patch makes, strict) of FAMILIES[index]."""
    if index < len(hf_models()):
        name, model_class, config, expected_count = hf_models()[index]
        torch.manual_seed(0)
        return name, config, model_class(config), expected_count, True
    import tiny_causal_lms

    name, class_name, expected_count, strict = TINY_FAMILIES[index - len(hf_models())]
    model = tiny_causal_lms.build(class_name)
    if name == "granite":
        model.config.logits_scaling = 8.0  # as real Granite checkpoints: the loss of logits / 8
    return name, model.config.get_text_config(), model, expected_count, strict


def _rotary_functions(model):
    """The rotary functions of the model's modeling module, as they are."""
    modeling = sys.modules[type(model).__module__]
    return {name: value for name, value in vars(modeling).items() if name.startswith("apply_rotary")}


class Unpatched(torch.nn.Module):
    """Runs a model with its modeling module's own rotary functions (patch
    replaces them module-wide), so that it stays the reference."""

    def __init__(self, model, rotary):
        super().__init__()
        self.model, self.rotary = model, rotary
        self.modeling = sys.modules[type(model).__module__]

    def forward(self, *args, **kwargs):
        return self._original(self.model, *args, **kwargs)

    def generate(self, *args, **kwargs):
        return self._original(self.model.generate, *args, **kwargs)

    def _original(self, call, *args, **kwargs):
        patched = {name: getattr(self.modeling, name) for name in self.rotary}
        vars(self.modeling).update(self.rotary)
        try:
            return call(*args, **kwargs)
        finally:
            vars(self.modeling).update(patched)


def twins(index, device):
    """A randomly initialised model (norm weights moved off their
    initialisation, so that Gemma's 1 + weight is tested), as the reference
    (torch ops throughout), and a patched copy."""
    name, config, original, expected_count, strict = build(index)
    original = original.to(device)
    with torch.no_grad():
        for module in original.modules():
            if type(module).__name__.endswith("RMSNorm") and getattr(module, "weight", None) is not None:
                module.weight.add_(0.1 * torch.randn_like(module.weight))
    rotary = _rotary_functions(original)
    patched = copy.deepcopy(original)
    assert fo.patch(patched, strict=strict) == expected_count
    return name, config, Unpatched(original, rotary), patched


@pytest.mark.parametrize("index", range(len(FAMILIES)), ids=FAMILIES)
def test_patched_hf_model_matches_and_trains(index, device):
    name, config, original, patched = twins(index, device)
    # the same Parameter objects, in the same places
    assert [n for n, _ in patched.named_parameters()] == [n for n, _ in original.model.named_parameters()]

    tokens = torch.randint(0, config.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1)).to(device)
    labels = tokens.clone()
    labels[0, :5] = -100  # ignored positions, as padding gives
    original.train()
    patched.train()
    out_original = original(input_ids=tokens, labels=labels)
    out_patched = patched(input_ids=tokens, labels=labels)
    assert out_patched.logits is None  # the fused loss never makes them
    torch.testing.assert_close(out_patched.loss, out_original.loss, atol=0, rtol=2e-4)
    out_original.loss.backward()
    out_patched.loss.backward()
    for (n, a), (_, b) in zip(patched.named_parameters(), original.model.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-3, msg=lambda m: f"{name} {n}: {m}")

    # a Trainer's gradient accumulation: a sum over num_items_in_batch
    items = torch.tensor(40, device=device)
    loss_original = original(input_ids=tokens, labels=labels, num_items_in_batch=items).loss
    loss_patched = patched(input_ids=tokens, labels=labels, num_items_in_batch=items).loss
    torch.testing.assert_close(loss_patched, loss_original, atol=0, rtol=2e-4)

    # a few optimizer steps: the loss falls, and the twins stay together
    for model in (original, patched):
        model.zero_grad()
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (original, patched)]
    losses = {0: [], 1: []}
    for _ in range(3):
        for i, (model, optimizer) in enumerate(zip((original, patched), optimizers)):
            loss = model(input_ids=tokens, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[i].append(loss.item())
    assert losses[1][-1] < losses[1][0]
    for a, b in zip(losses[0], losses[1]):
        assert abs(a - b) <= 2e-4 * abs(a)


@pytest.mark.parametrize("implementation", ["eager", "grouped_mm", "batched_mm"])
@pytest.mark.parametrize("family", ["mixtral", "qwen3_moe", "gpt_oss"])
def test_patched_experts_match_in_every_experts_implementation(family, implementation, device):
    """transformers runs experts by a loop, grouped_mm or batched_mm, as
    config._experts_implementation says: patched experts compute what each does."""
    _, config, original, patched = twins(FAMILIES.index(family), device)
    for model in (original.model, patched):
        model.set_experts_implementation(implementation)
    tokens = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3)).to(device)
    loss_original = original(input_ids=tokens, labels=tokens).loss
    loss_patched = patched(input_ids=tokens, labels=tokens).loss
    torch.testing.assert_close(loss_patched, loss_original, atol=0, rtol=2e-4)
    loss_original.backward()
    loss_patched.backward()
    for (n, a), (_, b) in zip(patched.named_parameters(), original.model.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-3, msg=lambda m: f"{family} {n}: {m}")


@pytest.mark.parametrize("index", range(len(FAMILIES)), ids=FAMILIES)
def test_patched_hf_model_generates_the_same_tokens(index, device):
    name, config, original, patched = twins(index, device)
    original.eval()
    patched.eval()
    prompt = torch.randint(0, config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(2)).to(device)
    with torch.no_grad():
        logits_original = original(input_ids=prompt).logits
        logits_patched = patched(input_ids=prompt).logits
        torch.testing.assert_close(logits_patched, logits_original, atol=1e-4, rtol=1e-4)
        generated = [m.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0) for m in (original, patched)]
    assert torch.equal(generated[0], generated[1])


def test_patch_chooses_what_to_replace(device):
    _, _, reference, _ = twins(0, device)  # llama: 5 norms, 2 MLPs, RoPE, the loss
    original = reference.model
    assert fo.patch(copy.deepcopy(original), norms=False, rope=False, cross_entropy=False) == 2
    assert fo.patch(copy.deepcopy(original), mlp=False, rope=False, cross_entropy=False) == 5
    model = copy.deepcopy(original)
    assert fo.patch(model, norms=False, mlp=False, rope=False) == 1
    assert fo.patch(model) == 7  # norms and MLPs (RoPE: patched module-wide by twins already)
    assert fo.patch(model) == 0  # nothing left to replace


def test_strict_names_what_it_does_not_know_and_changes_nothing():
    tiny_causal_lms = pytest.importorskip("tiny_causal_lms")
    model = tiny_causal_lms.build("DeepseekV3ForCausalLM")  # its interleaved RoPE, rotated after a permute
    modeling = sys.modules[type(model).__module__]
    modules, rotary = dict(model.named_modules()), _rotary_functions(model)
    with pytest.raises(fo.PatchError, match=r"1 part\(s\).*modeling_deepseek_v3\.apply_rotary_pos_emb_interleave"):
        fo.patch(model, strict=True)
    assert dict(model.named_modules()) == modules  # the very same modules
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert {name: getattr(modeling, name) for name in rotary} == rotary
    assert fo.patch(model) == 9 + 3 + 1 + 1  # without strict: what it knows


def test_a_rotary_function_with_a_hub_kernel_is_kept():
    """transformers' `kernels` wrapper around apply_rotary_pos_emb: the
    function inside is recognised, unless kernelize gave the model a hub
    kernel for it (the model's own copy of the wrapper has a forward)."""
    transformers = pytest.importorskip("transformers")
    modeling = sys.modules[transformers.LlamaForCausalLM.__module__]
    wrapper = modeling.apply_rotary_pos_emb
    if not isinstance(wrapper, torch.nn.Module):
        pytest.skip("transformers' apply_rotary_pos_emb is a plain function here (no kernels package)")
    _, model_class, config, _ = hf_models()[0]  # llama
    model = model_class(config)
    hub_kernel = model.model.layers[0].self_attn._kernel_funcs["rotary_pos_emb"]
    assert type(hub_kernel) is type(wrapper)
    hub_kernel.forward = lambda q, k, cos, sin, unsqueeze_dim=1: (q, k)  # as kernelize sets a layer's forward
    with pytest.raises(fo.PatchError, match=r"1 part\(s\).*modeling_llama\.apply_rotary_pos_emb"):
        fo.patch(model, strict=True, norms=False, mlp=False, cross_entropy=False)
    assert fo.patch(model, norms=False, mlp=False, cross_entropy=False) == 0
    assert modeling.apply_rotary_pos_emb is wrapper
    del hub_kernel.forward
    assert fo.patch(model, norms=False, mlp=False, cross_entropy=False) == 1
