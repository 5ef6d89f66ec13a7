"""Tiny, randomly initialised fp32 Hugging Face causal LMs, one for each
*ForCausalLM class that the installed transformers exports, built on the CPU
from its config class's defaults shrunk (hidden size 64, 2 layers, a vocab
of 128: mostly under 200k parameters, built in tens of milliseconds; no
downloads)."""

import dataclasses

import torch
import transformers

transformers.logging.set_verbosity_error()  # tiny configs draw many warnings

CAUSAL_LM_NAMES = sorted(n for n in dir(transformers) if n.endswith("ForCausalLM") and n != "AutoModelForCausalLM")

VOCAB = 128
LAYERS = 2

# config field -> tiny value, in every config and sub-config that has it
SIZES = {
    **dict.fromkeys(
        [
            "vocab_size",
            "vocab_size_per_layer_input",
            "ngram_vocab_size_base",
            "unpadded_vocab_size",
            "encoder_hash_byte_group_vocab",
            "shape_vocab_size",
            "pronunciation_vocab_size",
        ],
        VOCAB,
    ),
    **dict.fromkeys(
        [
            "hidden_size",
            "d_model",
            "n_embd",
            "embedding_dim",
            "hidden_size_global",
            "backbone_hidden_size",
            "router_hidden_size",
            "ext_pw_out_channel",
            "depthwise_separable_out_channel",
            "nemo_conv_channels",
        ],
        64,
    ),
    **dict.fromkeys(
        [
            "intermediate_size",
            "ffn_dim",
            "n_inner",
            "decoder_ffn_dim",
            "encoder_ffn_dim",
            "ffn_hidden_size",
            "intermediate_size_mlp",
            "dense_intermediate_size",
            "dim_ff",
            "mlp_only_intermediate_size",
        ],
        128,
    ),
    **dict.fromkeys(
        [
            "num_hidden_layers",
            "n_layer",
            "n_layers",
            "num_layers",
            "decoder_layers",
            "encoder_layers",
            "num_decoder_layers",
            "num_encoder_layers",
        ],
        LAYERS,
    ),
    **dict.fromkeys(
        [
            "num_attention_heads",
            "n_head",
            "n_heads",
            "num_heads",
            "attention_heads",
            "decoder_attention_heads",
            "encoder_attention_heads",
            "num_decoder_attention_heads",
            "num_encoder_attention_heads",
            "swa_num_attention_heads",
        ],
        4,
    ),
    **dict.fromkeys(["num_key_value_heads", "num_kv_heads", "swa_num_key_value_heads"], 2),
    **dict.fromkeys(
        [
            "head_dim",
            "swa_head_dim",
            "kv_channels",
            "dim_head",
            "hidden_size_per_layer_input",
            "laurel_rank",
            "hc_lowrank",
            "ple_embed_dim",
            "index_head_dim",
            "shape_embed_dim",
            "pronunciation_embed_dim",
        ],
        16,
    ),
    **dict.fromkeys(
        ["max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_target_positions", "context_length"],
        128,
    ),
    # MoE
    **dict.fromkeys(["num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "zero_expert_num"], 4),
    **dict.fromkeys(
        ["num_experts_per_tok", "num_experts_per_token", "moe_k", "moe_topk", "n_group", "num_expert_group"], 2
    ),
    "topk_group": 1,
    **dict.fromkeys(["n_groups", "mamba_n_groups", "mamba_ngroups"], 2),
    **dict.fromkeys(
        [
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "expert_ffn_hidden_size",
            "shared_intermediate_size",
            "shared_experts_intermediate_size",
            "moe_shared_expert_intermediate_size",
        ],
        64,
    ),
    # multi-head latent attention (DeepSeek)
    **dict.fromkeys(["kv_lora_rank", "q_lora_rank", "o_lora_rank"], 32),
    **dict.fromkeys(["index_n_heads", "indexer_n_heads"], 4),
    "index_topk": 8,
    **dict.fromkeys(["qk_nope_head_dim", "v_head_dim"], 16),
    **dict.fromkeys(["qk_rope_head_dim", "rotary_dim"], 8),
    # state-space and linear attention
    **dict.fromkeys(["state_size", "mamba_d_state", "ssm_state_size"], 8),
    **dict.fromkeys(
        ["linear_key_head_dim", "linear_value_head_dim", "linear_head_dim", "mamba_d_head", "mamba_head_dim"], 16
    ),
    **dict.fromkeys(
        ["linear_num_key_heads", "linear_num_value_heads", "linear_num_heads", "mamba_n_heads", "mamba_num_heads"], 4
    ),
}


def _layer_indices(values):
    """The layers of the full model that the tiny one keeps: the first, then
    the first that differs from it, so that both kinds of layer are built."""
    different = [i for i, v in enumerate(values) if v != values[0]]
    return [0, different[0]] if different else list(range(len(values)))[:LAYERS]


def _per_layer(values, old_layers):
    return [values[i] for i in _layer_indices(values)] if len(values) == old_layers else values


def _sub_config_class(config_class, key, d):
    sub = config_class.sub_configs[key]
    return transformers.CONFIG_MAPPING[d["model_type"]] if sub is transformers.AutoConfig else sub


def _shrink(d, config_class):
    """Shrinks a config's to_dict() in place, recursing into sub-configs.
    Numbers that __post_init__ derives (no field, or a field defaulting to
    None) are dropped, to be derived anew from the tiny sizes, but for the
    key-value heads: 2 of 4 heads keeps grouped-query attention."""
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    for field, key in config_class.attribute_map.items():  # to_dict() names some fields by an alias
        if field in defaults and key in d:
            d[field] = d.pop(key)
    for key, value in list(d.items()):
        if (
            defaults.get(key) is None
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
            and key != "num_key_value_heads"
        ):
            del d[key]
    layer_types = d.get("layer_types")
    old_layers = next(
        (d[k] for k in ("num_hidden_layers", "n_layer", "num_layers", "decoder_layers") if isinstance(d.get(k), int)),
        None,
    )
    for key, value in list(d.items()):
        if key in config_class.sub_configs and isinstance(value, dict):
            _shrink(value, _sub_config_class(config_class, key, value))
        elif key in SIZES and value is None:  # some defaults leave sizes unset
            d[key] = SIZES[key]
        elif key in SIZES and isinstance(value, int) and not isinstance(value, bool):
            d[key] = min(value, SIZES[key])
        elif key in SIZES and isinstance(value, list):  # per-layer sizes
            d[key] = [min(v, SIZES[key]) for v in _per_layer(value, old_layers)]
        elif key == "per_layer_config" and value:  # keyed by the full model's layer indices
            configs = {int(i): layer for i, layer in value.items()}
            indices = _layer_indices(layer_types) if layer_types else range(LAYERS)
            d[key] = {new: configs[old] for new, old in enumerate(indices) if old in configs}
            for layer in d[key].values():
                _shrink(layer, config_class)
        elif ("drop" in key or "jitter" in key) and (isinstance(value, float) or value is None):
            d[key] = 0.0  # no randomness in training: both models see the same computation
        elif isinstance(value, list) and old_layers:
            d[key] = _per_layer(value, old_layers)
        elif key.endswith("_token_id") and isinstance(value, int) and value >= VOCAB:
            d[key] = value % VOCAB
        elif key.endswith("_token_id") and isinstance(value, list):
            d[key] = [v % VOCAB for v in value]
        elif key == "sliding_window" and isinstance(value, int):
            d[key] = 8  # shorter than the inputs: the window matters
    if "kv_lora_rank" in d:  # multi-head latent attention: a key per head, rotary on part of it
        d["num_key_value_heads"] = d["num_attention_heads"]
        if "head_dim" in d:
            d["head_dim"] = d["qk_rope_head_dim"]


def config(name):
    config_class = getattr(transformers, name).config_class
    d = config_class().to_dict()
    _shrink(d, config_class)
    d["use_cache"] = False  # training forwards: no KV cache
    _merge(d, OVERRIDES.get(name, {}))
    return config_class.from_dict(d)


def _merge(d, overrides):
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(d.get(key), dict):
            _merge(d[key], value)
        else:
            d[key] = value


def build(name, seed=0):
    """The tiny model of class `name`, in train mode, with its norms' weights
    moved off their init (so that offsets like Gemma's 1 + weight count)."""
    torch.manual_seed(seed)
    model = getattr(transformers, name)(config(name)).float()
    with torch.no_grad():
        for module in model.modules():
            if "Norm" in type(module).__name__:
                for p in module.parameters(recurse=False):
                    if p.dim() == 1:
                        p.add_(0.1 * torch.randn_like(p))
    return model.train()


# per-class config fields that the generic shrinking does not get right (or
# that the class's defaults leave unset or inconsistent)
MAMBA = dict(mamba_d_head=32)  # heads * head size = 2 * hidden
OVERRIDES = {
    "BambaForCausalLM": dict(MAMBA, attn_layer_indices=[1]),
    # no entropy crosses it (ln 128 < 100): no patch boundary that a rounding could move
    "BltForCausalLM": dict(patching_threshold=100.0),
    # the defaults give no RoPE to its one layer type
    "CohereCompassForCausalLM": dict(rope_parameters=dict(full_attention=dict(rope_type="default", rope_theta=1e4))),
    # its attention reads rope_theta there, and clamps by clip_qkv (None by default)
    "DbrxForCausalLM": dict(attn_config=dict(rope_theta=1e4, kv_n_heads=2, clip_qkv=8.0)),
    "DoryForCausalLM": dict(
        num_hidden_layers=3,
        n_input_layers=1,
        n_recurrent_layers=1,
        n_output_layers=1,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    ),
    # its first layers are dense: the second is MoE
    "DeepseekV3ForCausalLM": dict(first_k_dense_replace=1),
    "Dots1ForCausalLM": dict(n_shared_experts=1),  # None by default
    "Dots3NoteForCausalLM": dict(per_layer_config={1: dict(head_dim=16 + 8)}),  # qk_nope + qk_rope
    "FalconH1ForCausalLM": dict(MAMBA, mamba_d_ssm=128),
    "Gemma3nForCausalLM": dict(num_kv_shared_layers=0),  # 15 layers by default
    "GitForCausalLM": dict(vision_config=dict(image_size=32, patch_size=16)),  # 5 image tokens
    "GraniteMoeHybridForCausalLM": dict(MAMBA, layer_types=["linear_attention", "full_attention"]),
    "JambaForCausalLM": dict(attn_layer_period=2, attn_layer_offset=1),  # an attention layer too
    # its defaults index layers past the second; a top-k over all 12 tokens: no choice a rounding could move
    "Kolibri1_1ForCausalLM": dict(
        layer_types=["sliding_attention", "indexed_attention"],
        index_layers=[1],
        kv_source_layers=[0, 1],
        mlp_only_layers=[0],
        index_topk=16,
        index_pool_size=64,
        index_num_heads=2,
    ),
    "Lfm2MoeForCausalLM": dict(layer_types=["conv", "full_attention"]),  # None by default
    "Mamba2ForCausalLM": dict(head_dim=32),  # heads * head size = 2 * hidden
    "Mistral4ForCausalLM": dict(rope_parameters=dict(partial_rotary_factor=8 / 24)),  # qk_rope / qk_head
    # its attention's indexer has no defaults
    "Qwen4ExpForCausalLM": dict(
        indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=8, indexer_compress_ratio=2
    ),
    "RecurrentGemmaForCausalLM": dict(block_types=["recurrent", "attention"]),  # an attention layer too
    "ZambaForCausalLM": dict(layers_block_type=["hybrid", "hybrid"]),  # two layers share one attention
    "Zamba2ForCausalLM": dict(hybrid_layer_ids=[1]),  # derived from the 54 layers of the defaults
}


def _musicgen_inputs(model, input_ids, labels):
    """A row of codes per codebook (batch * codebooks, seq); labels (batch, seq, codebooks)."""
    k, vocab = model.config.num_codebooks, model.config.vocab_size
    codes = (input_ids[:, None, :] + 7 * torch.arange(k)[None, :, None]) % (vocab - 1) + 1
    codebook_labels = codes.transpose(1, 2).masked_fill(labels[:, :, None] == -100, -100)
    return dict(input_ids=codes.flatten(0, 1), labels=codebook_labels)


def _git_inputs(model, input_ids, labels):
    """An image before the text: Git's loss skips the image's positions."""
    size = model.config.vision_config.image_size
    pixel_values = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    return dict(input_ids=input_ids, labels=labels, pixel_values=pixel_values)


# per-class forward arguments, from the default input_ids and labels
INPUTS = {
    "GitForCausalLM": _git_inputs,
    "MusicgenForCausalLM": _musicgen_inputs,
    "MusicgenMelodyForCausalLM": _musicgen_inputs,
    "XmodForCausalLM": lambda model, input_ids, labels: dict(
        input_ids=input_ids, labels=labels, lang_ids=torch.zeros(2, dtype=torch.long)
    ),
}

# what cannot be built (or run) from a config alone, and why
_DRAFTER = "a speculative-decoding drafter: runs on its target's embeddings and KV states, has no loss"
UNBUILDABLE = {
    "Gemma4AssistantForCausalLM": _DRAFTER,
    "Gemma4UnifiedAssistantForCausalLM": _DRAFTER,
}


def inputs(name, model, seed=0):
    """Forward arguments for `model` of class `name`: input_ids (2, 12) in
    [1, vocab), labels with a few positions ignored (-100), and what the
    class needs beside them (INPUTS)."""
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.get_text_config().vocab_size
    input_ids = torch.randint(1, vocab, (2, 12), generator=generator)
    labels = input_ids.clone()
    labels[0, :3] = -100
    labels[1, -2:] = -100
    if name in INPUTS:
        return INPUTS[name](model, input_ids, labels)
    return dict(input_ids=input_ids, labels=labels)
