"""patch(model, fp8=...): the attention and MLP projections become
Float8Linear (their GEMMs in FP8, emulated where torch._scaled_mm has no
kernel), sharing their Parameters; the LM head keeps its precision; the CPU
and GPUs below compute capability 8.9 get an error naming the device."""

import copy
import types

import pytest
import torch

import fused_ops_py as fo
from fused_ops_py.patching import fp8
from fused_ops_py.patching.fp8 import check_fp8_device, patch_fp8

pytestmark = pytest.mark.usefixtures("restored_modeling_functions")


def tiny_llama(dtype=torch.float32):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(dtype)


def sqnr_db(approx, exact):
    return (10 * torch.log10(exact.double().square().sum() / (approx.double() - exact.double()).square().sum())).item()


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_projections_become_float8_linear_with_the_same_parameters(recipe):
    model = tiny_llama()
    reference = copy.deepcopy(model)
    weights = {name: p for name, p in model.named_parameters()}
    assert patch_fp8(model, recipe) == (2 * 7, [])  # q, k, v, o, gate, up, down a layer
    layer = model.model.layers[0]
    for linear in (
        *(getattr(layer.self_attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")),
        *(getattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")),
    ):
        assert isinstance(linear, fo.Float8Linear) and linear.recipe == recipe
    assert type(model.lm_head) is torch.nn.Linear  # the LM head keeps its precision
    assert all(p is weights[name] for name, p in model.named_parameters())  # the very same Parameters
    assert model.state_dict().keys() == reference.state_dict().keys()
    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    out = model(tokens, labels=tokens)
    want = reference(tokens, labels=tokens)
    # FP8's rounding of every projection's operands: e4m3 keeps ~5% a value
    assert sqnr_db(out.logits, want.logits) > 20
    assert abs(out.loss.item() - want.loss.item()) < 0.02 * want.loss.item()
    out.loss.backward()
    want.loss.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert sqnr_db(p.grad, q.grad) > 10, name  # gradients: e5m2 (tensorwise) or e4m3 through two GEMMs
    assert patch_fp8(model, recipe) == (0, [])  # nothing left to replace


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_siblings_share_one_cast_of_their_input(recipe):
    """q/k/v share one SharedInputCast, gate/up another, o and down none; the
    model computes the same bits as with every projection casting alone."""
    model = tiny_llama(torch.bfloat16)
    patch_fp8(model, recipe)
    attention, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    qkv = {id(attention.q_proj.input_cast), id(attention.k_proj.input_cast), id(attention.v_proj.input_cast)}
    assert len(qkv) == 1 and attention.q_proj.input_cast is not None and attention.q_proj.input_cast.readers == 3
    assert mlp.gate_proj.input_cast is mlp.up_proj.input_cast is not None and mlp.up_proj.input_cast.readers == 2
    assert attention.o_proj.input_cast is None and mlp.down_proj.input_cast is None
    assert attention.q_proj.input_cast is not model.model.layers[1].self_attn.q_proj.input_cast
    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(1))
    results = []
    for _ in range(2):
        model.zero_grad()
        out = model(tokens, labels=tokens)
        out.loss.backward()
        results.append([out.logits] + [p.grad for p in model.parameters()])
        for module in model.modules():
            if isinstance(module, fo.Float8Linear):
                module.input_cast = None
    for shared, alone in zip(*results):
        assert torch.equal(shared, alone)


@pytest.mark.parametrize("act", ["silu", "gelu_pytorch_tanh", "gelu"])
@pytest.mark.parametrize("grad", [True, False])
def test_the_gate_hands_its_fp8_output_to_down(act, grad, monkeypatch):
    """A patched MLP's tensorwise down_proj takes the gate's FP8 output (no
    16-bit product): the same bits, forward and every gradient, as down_proj
    casting the product itself."""
    from fused_ops_py.patching import mlp as patched_mlp

    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, hidden_act=act)
    tokens = torch.randn(2, 24, 64, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(3))
    fed, feed = [], patched_mlp.gate_float8_input
    monkeypatch.setattr(patched_mlp, "gate_float8_input", lambda *a, **k: fed.append(1) or feed(*a, **k))
    results = []
    for fp8_gate in (True, False):
        if not fp8_gate:  # down_proj casts the product itself
            monkeypatch.setattr(patched_mlp, "_FP8_GATES", {})
        torch.manual_seed(0)
        mlp = transformers.models.llama.modeling_llama.LlamaMLP(config).to(torch.bfloat16)
        fo.patch(mlp)
        patch_fp8(mlp, "tensorwise")
        x = tokens.clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad):
            out = mlp(x)
        if grad:
            out.float().square().sum().backward()
        results.append([out] + ([x.grad] + [p.grad for p in mlp.parameters()] if grad else []))
    assert fed == [1]
    for fused, alone in zip(*results):
        assert fused is not None and torch.equal(fused, alone)


def test_fp8_model_loss_takes_chunks_of_twice_the_default(monkeypatch):
    from fused_ops_py.ops.linear_cross_entropy import default_chunk_rows
    from fused_ops_py.patching import loss

    chunks = []
    fused = loss.linear_cross_entropy_fp32
    monkeypatch.setattr(
        loss, "linear_cross_entropy_fp32", lambda *args, **kw: chunks.append(kw["chunk_rows"]) or fused(*args, **kw)
    )
    tokens = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(2))
    for fp8_too in (False, True):
        model = tiny_llama()
        fo.patch(model)
        if fp8_too:
            patch_fp8(model, "tensorwise")
        model(tokens, labels=tokens).loss.backward()
    assert chunks == [None, 2 * default_chunk_rows(tokens.numel(), 64, 128, 4)]


def test_projections_that_scaled_mm_cannot_take_are_kept():
    model = torch.nn.Module()
    model.q_proj = torch.nn.Linear(64, 40)  # 40: not a multiple of 16
    model.k_proj = torch.nn.Linear(64, 64)
    model.other = torch.nn.Linear(64, 64)  # not a projection patch knows
    shared = torch.nn.Linear(64, 64)
    model.gate_proj = model.up_proj = shared  # one module under two names: both replaced
    count, kept = patch_fp8(model, "tensorwise")
    assert count == 3 and kept == ["q_proj (Linear: out_features=40, not a multiple of 16)"]
    assert isinstance(model.k_proj, fo.Float8Linear) and type(model.other) is torch.nn.Linear
    assert isinstance(model.gate_proj, fo.Float8Linear) and isinstance(model.up_proj, fo.Float8Linear)
    assert model.gate_proj.weight is shared.weight and model.up_proj.weight is shared.weight
    with pytest.raises(ValueError, match="k_proj is already a Float8Linear with recipe='tensorwise'"):
        patch_fp8(model, "rowwise")


def test_fp8_needs_a_gpu_of_compute_capability_8_9(monkeypatch):
    model = tiny_llama()
    with pytest.raises(ValueError, match=r"the model is on cpu; FP8 GEMMs .* compute capability 8.9"):
        fo.patch(model, fp8=True)
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear  # nothing changed
    with pytest.raises(ValueError, match="fp8='blockwise' must be False, True, 'tensorwise' or 'rowwise'"):
        fo.patch(model, fp8="blockwise")
    # a projection on an sm_80 GPU (this machine may have none: its device and capability are stood in)
    on_a100 = types.SimpleNamespace(weight=types.SimpleNamespace(device=torch.device("cuda:0")))
    monkeypatch.setattr(fp8, "_projections", lambda model: [(model, on_a100)])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(ValueError, match=r"cuda:0, a NVIDIA A100-SXM4-80GB of compute capability 8.0"):
        check_fp8_device(model)
