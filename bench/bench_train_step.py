"""One training step (forward + backward, no optimizer) of a randomly initialised
Hugging Face causal LM, bf16, sdpa, batch 4 x 2048 random tokens:
  --model llama (default): Llama, 4 layers, hidden 4096, intermediate 11008, 32/8 heads; vocab 32000 and
    128256; rows eager, liger (all its Llama kernels), compile, patch (fused_ops_py.patch), patch_compile,
    patch_norms and, where torch has F.linear_cross_entropy, torch_lce.
  --model qwen3_moe: Qwen3-MoE (a small Qwen3-30B-A3B), 4 layers, hidden 2048, 32/4 heads of 128, 64 experts
    of 768, 8 a token; vocab 32000; rows eager, liger (all its Qwen3-MoE kernels: its fused MoE too), patch.
A fresh model (seed 0) per row, each row in its own process (Liger rebinds transformers' modeling modules
and patched models hold reference cycles: a later row in the same process would carry both): the memory
allocated before the row builds its model (mem_before_gib), the first step's loss (same inputs everywhere),
warm-up steps (compiling), the median of --steps steps (CUDA events) and their peak memory. Then greedy
decoding, eager and patched, also a process each: tokens/s, and whether the tokens agree. A failing row is
an "oom" or "error: ..." note; the targets are stated above the table.
  --breakdown: also profiles two steps of the eager, patch, patch_fp8 and torchao_fp8_compile rows and sums
    their CUDA kernels' time by category (experts' GEMMs, FP8 GEMMs, other GEMMs, attention, routing,
    fused_ops_py, other: CATEGORIES says how).

    python bench/bench_train_step.py            # Llama; about 5-7 min a vocab on an H100
    python bench/bench_train_step.py --model qwen3_moe --breakdown    # about 5-6 min (5.4 on an H200)
    python bench/bench_train_step.py --vocabs 32000 --providers eager,patch --no-decode
    python bench/bench_train_step.py --tiny --steps 2 --out /tmp/ts   # smoke test, any device
    python bench/bench_train_step.py --no-decode --providers liger,patch,patch_fp8,patch_fp8_rowwise,\
        patch_fp8_compile,patch_fp8_compile_layers,torchao_fp8,torchao_fp8_compile,torchao_fp8_rowwise_compile
        # the FP8 rows (_compile_layers: torch.compile on each decoder layer, as torchtitan compiles)

Writes train_step.csv and train_step.md (train_step_<model>.* for a model other than llama) and with
--breakdown train_step_<model>_breakdown.csv/.md under --out (default bench/results/<gpu>/).
"""

import argparse
import csv
import gc
import importlib.metadata
import inspect
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

PROVIDERS = ["eager", "liger", "compile", "patch", "patch_compile", "patch_norms"] + (
    ["torch_lce"] if hasattr(F, "linear_cross_entropy") else []
)
# FP8 rows (GPUs of compute capability 8.9 on, each asked for by --providers): patch(fp8=...) and torchao.float8
# (convert_to_float8_training, the LM head kept in bf16 as patch keeps it), eager and compiled
FP8_PROVIDERS = [
    "patch_fp8",
    "patch_fp8_rowwise",
    "patch_fp8_compile",
    "patch_fp8_compile_layers",
    "torchao_fp8",
    "torchao_fp8_compile",
    "torchao_fp8_rowwise_compile",
]
COMPILED = ("compile", "patch_compile", "patch_fp8_compile", "torchao_fp8_compile", "torchao_fp8_rowwise_compile")
DECODE = ["decode_eager", "decode_patch"]
FULL = dict(
    num_hidden_layers=4,
    hidden_size=4096,
    intermediate_size=11008,
    num_attention_heads=32,
    num_key_value_heads=8,
    batch=4,
    seq=2048,
    prompt=16,
    new_tokens=128,
)
TINY = dict(
    num_hidden_layers=2,
    hidden_size=64,
    intermediate_size=176,
    num_attention_heads=4,
    num_key_value_heads=2,
    batch=2,
    seq=64,
    prompt=16,
    new_tokens=16,
)
MOE_FULL = dict(
    num_hidden_layers=4,
    hidden_size=2048,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    moe_intermediate_size=768,
    num_experts=64,
    num_experts_per_tok=8,
    norm_topk_prob=True,
    batch=4,
    seq=2048,
    prompt=16,
    new_tokens=128,
)
MOE_TINY = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    moe_intermediate_size=32,
    num_experts=8,
    num_experts_per_tok=2,
    norm_topk_prob=True,
    batch=2,
    seq=64,
    prompt=16,
    new_tokens=16,
)
# (row, its column, the value, the rows it is checked against, factor): ms and peak_gib at most
# factor x the smallest of theirs; tokens_per_s at least factor x theirs. Rows missing: unchecked.
CHECKS = [
    ("patch", "target_time_met", "ms", ("liger",), 0.90),
    ("patch", "target_mem_met", "peak_gib", ("liger",), 1.0),
    ("patch_compile", "target_time_met", "ms", ("compile", "patch"), 0.95),
    ("patch_norms", "target_mem_met", "peak_gib", ("eager",), 1.0),
    ("decode_patch", "target_time_met", "tokens_per_s", ("decode_eager",), 1.0),
    ("patch_fp8", "target_time_met", "ms", ("torchao_fp8_compile",), 0.95),
    ("patch_fp8", "target_time_liger_met", "ms", ("liger",), 0.85),
    ("patch_fp8", "target_mem_met", "peak_gib", ("liger",), 1.0),
    ("patch_fp8_compile", "target_time_met", "ms", ("patch_fp8",), 1.0),
    ("patch_fp8_compile_layers", "target_time_met", "ms", ("patch_fp8",), 1.0),
]
MOE_CHECKS = [
    ("patch", "target_time_met", "ms", ("liger",), 1.0),  # against Liger's fused MoE experts
    ("patch", "target_mem_met", "peak_gib", ("liger",), 1.0),
    ("decode_patch", "target_time_met", "tokens_per_s", ("decode_eager",), 1.0),
]
MODELS = {
    "llama": dict(
        title="Llama",
        cls="LlamaForCausalLM",
        full=FULL,
        tiny=TINY,
        vocabs=[32000, 128256],
        providers=PROVIDERS,
        checks=CHECKS,
    ),
    "qwen3_moe": dict(
        title="Qwen3-MoE",
        cls="Qwen3MoeForCausalLM",
        full=MOE_FULL,
        tiny=MOE_TINY,
        vocabs=[32000],
        providers=["eager", "liger", "patch"],
        checks=MOE_CHECKS,
    ),
}
FIELDS = [
    "vocab",
    "provider",
    "ms",
    "tokens_per_s",
    "peak_gib",
    "mem_before_gib",
    "first_loss",
    "note",
    "target_time_met",
    "target_time_liger_met",
    "target_mem_met",
]
ROW_PREFIX = "row as json: "  # how a --row process hands its row to the parent, on stdout
# --breakdown: a kernel (on the CPU, an op's own time) is in the first category whose name pattern matches its
# name or whose op pattern matches an op it ran under: the op that launched it and that op's callers, lower-cased,
# without "aten::" and "autograd::engine::evaluate_function: " (backward nodes read "indexbackward0"). Routing: the
# router's softmax and topk, the sort, histc and cumsum of the experts' offsets, and the index, scatter and gather
# ops that move tokens to their experts and back.
CATEGORIES = [  # (category, kernel-name regex, op regex)
    # lib/cuda/*.cu: our kernels are in namespace fo; on the CPU our autograd Functions' own time is our C calls'
    (
        "fused_ops_py",
        r"\bfo::|^(Norm|BiasScaleReLU|Square|ReduceSum|SwiGLU|GeGLU|RoPE|(Linear)?CrossEntropy)Function",
        None,
    ),
    ("other", None, r"^embedding"),  # its index_select and sort move no tokens
    ("experts_gemm", r"GroupProblemShape|[Gg]rouped", r"grouped_?mm"),  # torch's grouped_mm, or transformers' fallback
    ("attention", r"flash|fmha|[Aa]ttention|sdpa|cudnn", r"scaled_?dot_?product|flash|efficient_attention"),
    ("routing", None, r"^_?(softmax|topk|sort|argsort|histc|bincount|cumsum|one_hot|nonzero|index|scatter|gather)"),
    ("fp8_gemm", None, r"^_scaled_mm"),  # patch(fp8=...)'s and torchao.float8's GEMMs
    ("other_gemm", r"gemm|nvjet|cutlass|xmma|cublas", r"^(mm|addmm_?|bmm|linear|matmul)$|^(mm|addmm|bmm)backward"),
    ("other", r"", None),
]
CATEGORY_NAMES = ["experts_gemm", "fp8_gemm", "other_gemm", "attention", "routing", "fused_ops_py", "other"]
BREAKDOWN_PROVIDERS, BREAKDOWN_STEPS = ("eager", "patch", "patch_fp8", "torchao_fp8_compile"), 2
BREAKDOWN_FIELDS = ["vocab", "provider", "category", "ms", "share"]


def build_model(config, device):
    """A fresh causal LM of config's model type, made in bf16 on `device` from seed 0: the same weights every time."""
    import transformers

    model_class = getattr(transformers, MODELS[config.model_type]["cls"])
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # as from_pretrained(dtype=bf16): inv_freq stays fp32
    try:
        with torch.device(device):
            return model_class(config)
    finally:
        torch.set_default_dtype(default)


def patch_options(fo, rope):
    return {"rope": rope} if "rope" in inspect.signature(fo.patch).parameters else {}


def torch_lce_loss(model):
    """(loss(ids, labels), note): the base model's last hidden state through F.linear_cross_entropy
    (its chunked path, however this torch spells it), labels shifted as Hugging Face does."""
    params = inspect.signature(F.linear_cross_entropy).parameters
    kwargs = {"ignore_index": -100} if "ignore_index" in params else {}
    if "options" in params and hasattr(torch.nn, "LinearCrossEntropyOptions"):
        kwargs["options"], note = torch.nn.LinearCrossEntropyOptions(), "options=LinearCrossEntropyOptions()"
    elif "chunking_strategy" in params:
        kwargs["chunking_strategy"], note = "batch", "chunking_strategy='batch'"
    else:
        note = "no chunked option in this torch"

    def loss(ids, labels):
        hidden = model.model(input_ids=ids).last_hidden_state
        shifted = F.pad(labels, (0, 1), value=-100)[..., 1:]
        return F.linear_cross_entropy(hidden.flatten(0, 1), model.lm_head.weight, shifted.flatten(), **kwargs)

    return loss, note


def prepare(provider, model, ids, labels):
    """(model, loss(), note) for a provider; the imports are here so that one failing is one row's error."""
    note = ""
    if provider == "liger":  # every Liger kernel for the model, on this instance (rope is module-wide)
        import liger_kernel.transformers

        apply = getattr(liger_kernel.transformers, f"apply_liger_kernel_to_{model.config.model_type}")
        apply(rope=True, cross_entropy=False, fused_linear_cross_entropy=True, rms_norm=True, swiglu=True, model=model)
        moe = " (LigerExperts: its fused MoE)" if model.config.model_type == "qwen3_moe" else ""
        note = f"rope, rms_norm, swiglu{moe}, fused_linear_cross_entropy"
    if provider.startswith("patch"):
        import fused_ops_py as fo

        norms_only = provider == "patch_norms"
        options = dict(mlp=False, cross_entropy=False) if norms_only else {}
        options.update(patch_options(fo, rope=not norms_only))
        if provider.startswith("patch_fp8"):
            options["fp8"] = "rowwise" if "rowwise" in provider else "tensorwise"
        note = f"patch({', '.join(f'{k}={v}' for k, v in options.items())}): {fo.patch(model, **options)} replaced"
    if provider.startswith("torchao_fp8"):
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        recipe = "rowwise" if "rowwise" in provider else "tensorwise"
        config = Float8LinearConfig.from_recipe_name(recipe)
        convert_to_float8_training(model, config=config, module_filter_fn=lambda module, fqn: fqn != "lm_head")
        note = f"torchao float8 {recipe} (lm_head in bf16)"
    if provider in COMPILED:
        model = torch.compile(model)
    if provider.endswith("_compile_layers"):  # torchtitan's way: each decoder layer, the mask built eagerly
        for layer in model.model.layers:
            layer.compile()
        note += "; each decoder layer compiled"
    if provider == "torch_lce":
        lce, note = torch_lce_loss(model)
        return model, lambda: lce(ids, labels), note
    return model, lambda: model(input_ids=ids, labels=labels).loss, note


def timed_ms(fn, device):
    """fn() once, in ms: CUDA events around it on a GPU, the wall clock elsewhere."""
    if device.type != "cuda":
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def category(name, op):
    """The CATEGORIES name of a kernel (or CPU op) called `name` that ran under `op` (a profiler event or None)."""
    ops = []
    while op is not None:
        ops.append(op.name.rsplit(": ", 1)[-1].removeprefix("aten::").lower())
        op = op.cpu_parent
    return next(
        c
        for c, by_name, by_op in CATEGORIES
        if (by_name is not None and re.search(by_name, name)) or (by_op and any(re.search(by_op, o) for o in ops))
    )


def breakdown(step, device):
    """{category: ms a step} over BREAKDOWN_STEPS steps under torch.profiler: the CUDA kernels on a GPU (each
    with the op that launched it), the ops' own CPU time elsewhere."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as trace:
        for _ in range(BREAKDOWN_STEPS):
            step()
        if cuda:
            torch.cuda.synchronize()
    events = trace.events()
    if cuda:
        launchers = {e.id: e for e in events if e.kernels}  # ops by correlation id, as kernels link to them
        items = [
            (k.name(), (k.end_ns() - k.start_ns()) / 1e3, launchers.get(k.linked_correlation_id()))
            for k in trace.profiler.kineto_results.events()
            if k.device_type() == DeviceType.CUDA
        ]
    else:
        items = [(e.name, e.self_cpu_time_total, e) for e in events if e.device_type == DeviceType.CPU]
    ms = dict.fromkeys(CATEGORY_NAMES, 0.0)
    for name, us, op in items:
        ms[category(name, op)] += us / 1e3 / BREAKDOWN_STEPS
    return ms


def train_body(row, args, config, device, ids, labels):
    model = build_model(config, device)
    model.train()
    model, loss_fn, row["note"] = prepare(row["provider"], model, ids, labels)

    def step():
        loss = loss_fn()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss.detach()

    row["first_loss"] = step().item()  # before any timing; compile starts compiling here
    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    row["ms"] = statistics.median(timed_ms(step, device) for _ in range(args.steps))
    row["tokens_per_s"] = ids.numel() / row["ms"] * 1e3
    if device.type == "cuda":
        row["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if args.breakdown and row["provider"] in BREAKDOWN_PROVIDERS:  # after the timed steps: they stay unprofiled
        row["breakdown"] = breakdown(step, device)


def decode_body(row, args, config, device, prompt, new_tokens):
    model = build_model(config, device)
    model.eval()
    if row["provider"] == "decode_patch":
        import fused_ops_py as fo

        row["note"] = f"patch: {fo.patch(model, **patch_options(fo, rope=True))} replaced"
    kwargs = dict(
        attention_mask=torch.ones_like(prompt),
        do_sample=False,
        min_new_tokens=new_tokens,
        max_new_tokens=new_tokens,
        pad_token_id=0,
    )
    with torch.no_grad():
        row["tokens"] = model.generate(prompt, **kwargs)[0, prompt.shape[1] :].tolist()  # the warm-up
        row["ms"] = statistics.median(
            timed_ms(lambda: model.generate(prompt, **kwargs), device) for _ in range(args.decode_runs)
        )
    row["tokens_per_s"] = new_tokens / row["ms"] * 1e3


def run_row(row, body, device):
    """Fills row by body(row); an error becomes the row's note, never raised. Then frees the model and undoes
    what a row changed module-wide (Liger's Llama classes; compile caches) for step_kernels.py, whose rows
    share a process."""
    from transformers.models.llama import modeling_llama

    saved = dict(vars(modeling_llama))
    try:
        body(row)
    except torch.cuda.OutOfMemoryError:
        row["note"] = "oom"
    except Exception as error:
        row["note"] = f"error: {type(error).__name__}: {' '.join(str(error).split())}"[:300]
    vars(modeling_llama).update(saved)
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    row.update({k: float(f"{v:.4g}") for k, v in row.items() if isinstance(v, float)})
    return row


def row_here(args, shape, device):
    """The row of --row at --vocabs' first vocab, computed in this process (a child of the parent's)."""
    from transformers import AutoConfig

    vocab = args.vocabs[0]
    batch, seq, prompt_len, new_tokens = (shape.pop(k) for k in ("batch", "seq", "prompt", "new_tokens"))
    config = lambda use_cache: AutoConfig.for_model(  # noqa: E731
        args.model,
        vocab_size=vocab,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
        use_cache=use_cache,
        **shape,
    )
    gen = torch.Generator(device=device).manual_seed(0)  # the same inputs for every row
    ids = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
    prompt = torch.randint(0, vocab, (1, prompt_len), device=device, generator=gen)
    row = dict(vocab=vocab, provider=args.row)
    if device.type == "cuda":
        from bench_cross_entropy import warm_up_the_gpu

        warm_up_the_gpu()  # a fresh process: the clocks climb from idle
        row["mem_before_gib"] = torch.cuda.memory_allocated() / 2**30  # more than the header says is a leftover
    if args.row in DECODE:
        return run_row(row, lambda r: decode_body(r, args, config(True), device, prompt, new_tokens), device)
    return run_row(row, lambda r: train_body(r, args, config(False), device, ids, ids), device)


def row_in_a_process(argv, vocab, provider):
    """The row as `this script argv --vocabs vocab --row provider` computes it in a child process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # it imports what we import
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *argv, "--vocabs", str(vocab), "--row", provider],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(ROW_PREFIX)]
    if not lines:  # it crashed: its stderr, passed through, says why
        return dict(vocab=vocab, provider=provider, note=f"error: its process exited with {done.returncode}")
    return json.loads(lines[-1].removeprefix(ROW_PREFIX))


def set_targets(rows, checks):
    """Fills the target columns of one vocab's rows."""
    value = lambda provider, key: next((r.get(key, "") for r in rows if r["provider"] == provider), "")  # noqa: E731
    for subject, column, key, against, factor in checks:
        row = next((r for r in rows if r["provider"] == subject), None)
        theirs = [value(p, key) for p in against]
        if row is None or "" in theirs:
            continue
        mine = row.get(key, "")
        higher = key == "tokens_per_s"
        bound = factor * (max if higher else min)(theirs)
        row[column] = mine != "" and (mine >= bound if higher else mine <= bound)


def targets_text(checks):
    def one(subject, _, key, against, factor):
        higher = key == "tokens_per_s"
        theirs = f"{against[0]}'s" if len(against) == 1 else f"{'max' if higher else 'min'}({', '.join(against)})"
        return f"{subject} {key} {'>=' if higher else '<='} {f'{factor:g} x ' if factor != 1 else ''}{theirs}"

    return (
        f"Targets, per vocab: {'; '.join(one(*c) for c in checks)}. A target is unchecked (blank) where a row "
        "it is checked against failed."
    )


def write_table(path, fields, rows, intro):
    """path.csv, and path.md: the intro's lines, then the table."""
    with open(path.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    cell = lambda v: ("yes" if v else "**no**") if isinstance(v, bool) else str(v).replace("|", "/")  # noqa: E731
    lines = [*intro, "", "| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
    lines += ["| " + " | ".join(cell(r.get(k, "")) for k in fields) + " |" for r in rows]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def write_outputs(rows, path, spec, header):
    checks = [r.get(k) for r in rows for k in FIELDS if k.startswith("target_")]
    met, missed = checks.count(True), checks.count(False)
    write_table(
        path,
        FIELDS,
        rows,
        [
            f"# {spec['title']} training step (forward + backward) and greedy decoding: fused_ops_py against its peers",
            "",
            header,
            "",
            targets_text(spec["checks"]),
            "",
            f"**{met} met, {missed} missed** of {met + missed} checks.",
        ],
    )
    return met, missed


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not found"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=list(MODELS), default="llama")
    p.add_argument(
        "--vocabs",
        type=lambda s: [int(v) for v in s.split(",")],
        help="comma-separated; default 32000,128256 (llama), 32000 (qwen3_moe)",
    )
    p.add_argument(
        "--providers",
        type=lambda s: s.split(","),
        help=f"comma-separated, of {','.join(PROVIDERS + FP8_PROVIDERS)}; default all but the FP8 rows (llama), "
        "eager,liger,patch (qwen3_moe)",
    )
    p.add_argument("--steps", type=int, default=10, help="timed steps (at least 10 for a result)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--decode", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--decode-runs", type=int, default=3)
    p.add_argument("--breakdown", action="store_true", help="profile the eager and patch rows' kernels by category")
    p.add_argument("--out", type=Path, help="default bench/results/<gpu>/")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # smoke test, any device
    p.add_argument(
        "--row", choices=PROVIDERS + FP8_PROVIDERS + DECODE, help=argparse.SUPPRESS
    )  # one row, in this process
    args = p.parse_args(argv)
    spec = MODELS[args.model]
    args.vocabs, args.providers = args.vocabs or spec["vocabs"], args.providers or spec["providers"]
    if unknown := set(args.providers) - set(PROVIDERS + FP8_PROVIDERS):
        p.error(f"unknown providers {sorted(unknown)}; choose from {','.join(PROVIDERS + FP8_PROVIDERS)}")
    if not (torch.cuda.is_available() or args.tiny):
        sys.exit("bench_train_step.py needs a CUDA GPU (--tiny runs anywhere)")
    from bench_ops import device_name, results_dir  # imports fused_ops_py: after --help

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dynamo = torch._dynamo.config  # newer name first
    knob = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
    setattr(dynamo, knob, max(64, getattr(dynamo, knob)))
    shape = dict(spec["tiny" if args.tiny else "full"])
    if args.row:
        print(ROW_PREFIX + json.dumps(row_here(args, shape, device)), flush=True)
        return
    out = Path(args.out or results_dir(device_name(device)))
    out.mkdir(parents=True, exist_ok=True)
    stem = "train_step" if args.model == "llama" else f"train_step_{args.model}"
    versions = (
        f"torch {torch.__version__}, transformers {version('transformers')}, liger_kernel "
        f"{version('liger_kernel')}, fused_ops_py {getattr(sys.modules['fused_ops_py'], '__version__', '?')}"
    )
    clock = "CUDA events" if device.type == "cuda" else "wall clock"
    batch, seq, prompt_len, new_tokens = (shape.pop(k) for k in ("batch", "seq", "prompt", "new_tokens"))
    header = (
        f"{device_name(device)}; {versions}. {spec['cls']} {shape}, sdpa, bf16, seed 0; batch {batch} x {seq}; "
        f"loss.backward(), no optimizer; each row in its own process; median of {args.steps} steps ({clock}) "
        f"after {args.warmup} warm-up; peak_gib: max_memory_allocated over them; mem_before_gib: "
        "memory_allocated before the row builds its model (its inputs, and on Hopper cuBLAS's 0.03 GiB "
        f"workspace; more is a leftover). Decode: greedy, batch 1, prompt {prompt_len}, "
        f"{new_tokens} new tokens, ms per generate(), median of {args.decode_runs} after 1 warm-up."
    )
    print(header, flush=True)
    rows, parts = [], []
    for vocab in args.vocabs:
        case, eager_tokens = [], None  # this vocab's rows: targets are set once the rows they check against are done
        for provider in args.providers + (DECODE if args.decode else []):
            if device.type != "cuda" and (provider in ("liger", *COMPILED) or "fp8" in provider):
                row = dict(vocab=vocab, provider=provider, note="skipped: needs CUDA")
            else:
                row = row_in_a_process(argv, vocab, provider)
            if (tokens := row.pop("tokens", None)) is not None and provider == "decode_eager":
                eager_tokens = tokens
            elif tokens is not None and eager_tokens is not None:  # equally long: min_new_tokens = max_new_tokens
                differ = next((i for i, (a, b) in enumerate(zip(tokens, eager_tokens)) if a != b), None)
                row["note"] += (
                    "; same tokens as eager" if differ is None else f"; differs from eager at new token {differ}"
                )
            if (ms := row.pop("breakdown", None)) is not None:
                total = sum(ms.values())
                parts += [
                    dict(
                        vocab=vocab,
                        provider=provider,
                        category=c,
                        ms=float(f"{v:.4g}"),
                        share=float(f"{v / total:.3g}") if total else "",
                    )
                    for c, v in ms.items()
                ]
                parts.append(
                    dict(vocab=vocab, provider=provider, category="total", ms=float(f"{total:.4g}"), share=1.0)
                )
            case.append(row)
            set_targets(case, spec["checks"])
            print(" ".join(f"{k}={v}" for k, v in row.items() if v != ""), flush=True)
            write_outputs(rows + case, out / stem, spec, header)
        rows += case
    met, missed = write_outputs(rows, out / stem, spec, header)
    print(f"{met} met, {missed} missed; wrote {out / stem}.csv and .md", flush=True)
    if args.breakdown:
        what = "CUDA kernel time" if device.type == "cuda" else "the ops' own CPU time (no GPU: a smoke test)"
        write_table(
            out / f"{stem}_breakdown",
            BREAKDOWN_FIELDS,
            parts,
            [
                f"# Where a {spec['title']} training step's time goes",
                "",
                header,
                "",
                (
                    f"{what} of {BREAKDOWN_STEPS} profiled steps (after the timed ones), ms a step, by category; "
                    "share: of the total. Categories by kernel name and by the op that launched the kernel "
                    "(bench_train_step.py's "
                    "CATEGORIES): experts_gemm (grouped_mm), attention (sdpa), routing (router softmax and topk, the "
                    "sort/histc/cumsum of the experts' offsets, index/scatter/gather moving tokens), fused_ops_py (our "
                    "kernels), other_gemm (projections, lm_head), other (elementwise, norms, loss, copies)."
                ),
            ],
        )
        print(f"wrote {out / stem}_breakdown.csv and .md", flush=True)


if __name__ == "__main__":
    main()
