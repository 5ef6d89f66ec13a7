"""One training step (forward + backward, no optimizer) of a randomly initialised
Hugging Face Llama (4 layers, hidden 4096, intermediate 11008, 32/8 heads, sdpa,
bf16), batch 4 x 2048 random tokens, vocab 32000 and 128256: eager, liger (all its
Llama kernels), compile, patch (fused_ops_py.patch), patch_compile, patch_norms and,
where torch has F.linear_cross_entropy, torch_lce. A fresh model (seed 0) per row:
the first step's loss (same inputs everywhere), warm-up steps (compiling), the median
of --steps steps (CUDA events) and their peak memory. Then greedy decoding, eager and
patched: tokens/s, and whether the tokens agree. A failing row is an "oom" or
"error: ..." note; the targets are stated above the table.

    python bench/bench_train_step.py            # all; about 3-5 min a vocab on an H100
    python bench/bench_train_step.py --vocabs 32000 --providers eager,patch --no-decode
    python bench/bench_train_step.py --tiny --steps 2 --out /tmp/ts   # smoke test, any device

Writes train_step.csv and train_step.md under --out (default bench/results/<gpu>/).
"""

import argparse
import csv
import gc
import importlib.metadata
import inspect
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

PROVIDERS = ["eager", "liger", "compile", "patch", "patch_compile", "patch_norms"] + (
    ["torch_lce"] if hasattr(F, "linear_cross_entropy") else [])
COMPILED = ("compile", "patch_compile")
FULL = dict(num_hidden_layers=4, hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
            num_key_value_heads=8, batch=4, seq=2048, prompt=16, new_tokens=128)
TINY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=176, num_attention_heads=4,
            num_key_value_heads=2, batch=2, seq=64, prompt=16, new_tokens=16)
# (row, its column, the value, the rows it is checked against, factor): ms and peak_gib at most
# factor x the smallest of theirs; tokens_per_s at least factor x theirs. Rows missing: unchecked.
CHECKS = [("patch", "target_time_met", "ms", ("liger",), 0.90),
          ("patch", "target_mem_met", "peak_gib", ("liger",), 1.0),
          ("patch_compile", "target_time_met", "ms", ("compile", "patch"), 0.95),
          ("patch_norms", "target_mem_met", "peak_gib", ("eager",), 1.0),
          ("decode_patch", "target_time_met", "tokens_per_s", ("decode_eager",), 1.0)]
TARGETS_TEXT = ("Targets, per vocab: patch ms <= 0.90 x liger's and patch peak_gib <= liger's; patch_compile "
                "ms <= 0.95 x min(compile, patch); patch_norms peak_gib <= eager's; decode_patch tokens_per_s "
                ">= decode_eager's. A target is unchecked (blank) where a row it is checked against failed.")
FIELDS = ["vocab", "provider", "ms", "tokens_per_s", "peak_gib", "first_loss", "note",
          "target_time_met", "target_mem_met"]


def build_model(config, device):
    """A fresh LlamaForCausalLM, made in bf16 on `device` from seed 0: the same weights every time."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # as from_pretrained(dtype=bf16): inv_freq stays fp32
    try:
        with torch.device(device):
            return LlamaForCausalLM(config)
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
    if provider == "liger":  # every Liger kernel for Llama, on this instance (rope is module-wide)
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=True, cross_entropy=False, fused_linear_cross_entropy=True,
                                    rms_norm=True, swiglu=True, model=model)
        note = "rope, rms_norm, swiglu, fused_linear_cross_entropy"
    if provider.startswith("patch"):
        import fused_ops_py as fo
        norms_only = provider == "patch_norms"
        options = dict(mlp=False, cross_entropy=False) if norms_only else {}
        options.update(patch_options(fo, rope=not norms_only))
        note = f"patch({', '.join(f'{k}={v}' for k, v in options.items())}): {fo.patch(model, **options)} replaced"
    if provider in COMPILED:
        model = torch.compile(model)
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


def train_body(row, args, config, device, ids, labels):
    if device.type != "cuda" and row["provider"] in ("liger", *COMPILED):
        row["note"] = "skipped: needs CUDA"
        return
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
    del model, loss_fn, step


def decode_body(row, args, config, device, prompt, new_tokens, ref):
    model = build_model(config, device)
    model.eval()
    if row["provider"] == "decode_patch":
        import fused_ops_py as fo
        row["note"] = f"patch: {fo.patch(model, **patch_options(fo, rope=True))} replaced"
    kwargs = dict(attention_mask=torch.ones_like(prompt), do_sample=False, min_new_tokens=new_tokens,
                  max_new_tokens=new_tokens, pad_token_id=0)
    with torch.no_grad():
        tokens = model.generate(prompt, **kwargs)[0, prompt.shape[1]:].tolist()  # the warm-up
        row["ms"] = statistics.median(timed_ms(lambda: model.generate(prompt, **kwargs), device)
                                      for _ in range(args.decode_runs))
    row["tokens_per_s"] = new_tokens / row["ms"] * 1e3
    if row["provider"] == "decode_eager":
        ref["tokens"] = tokens
    elif "tokens" in ref:  # equally long: min_new_tokens = max_new_tokens
        differ = next((i for i, (a, b) in enumerate(zip(tokens, ref["tokens"])) if a != b), None)
        row["note"] += "; same tokens as eager" if differ is None else f"; differs from eager at new token {differ}"
    del model


def run_row(row, body, device):
    """Fills row by body(row); an error becomes the row's note, never raised. Then frees the model
    and undoes what a row changed module-wide (Liger's rope, RMSNorm and MLP classes; compile caches)."""
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


def set_targets(rows):
    """Fills the target columns of one vocab's rows."""
    value = lambda provider, key: next((r.get(key, "") for r in rows if r["provider"] == provider), "")  # noqa: E731
    for subject, column, key, against, factor in CHECKS:
        row = next((r for r in rows if r["provider"] == subject), None)
        theirs = [value(p, key) for p in against]
        if row is None or "" in theirs:
            continue
        mine = row.get(key, "")
        higher = key == "tokens_per_s"
        bound = factor * (max if higher else min)(theirs)
        row[column] = mine != "" and (mine >= bound if higher else mine <= bound)


def write_outputs(rows, out, header):
    with open(out / "train_step.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    checks = [r.get(k) for r in rows for k in FIELDS if k.startswith("target_")]
    met, missed = checks.count(True), checks.count(False)
    cell = lambda v: ("yes" if v else "**no**") if isinstance(v, bool) else str(v).replace("|", "/")  # noqa: E731
    lines = ["# Llama training step (forward + backward) and greedy decoding: fused_ops_py against its peers",
             "", header, "", TARGETS_TEXT, "", f"**{met} met, {missed} missed** of {met + missed} target checks.",
             "", "| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    lines += ["| " + " | ".join(cell(r.get(k, "")) for k in FIELDS) + " |" for r in rows]
    (out / "train_step.md").write_text("\n".join(lines) + "\n")
    return met, missed


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not found"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocabs", type=lambda s: [int(v) for v in s.split(",")], default=[32000, 128256])
    p.add_argument("--providers", type=lambda s: s.split(","), default=PROVIDERS,
                   help=f"comma-separated, of {','.join(PROVIDERS)}")
    p.add_argument("--steps", type=int, default=10, help="timed steps (at least 10 for a result)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--decode", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--decode-runs", type=int, default=3)
    p.add_argument("--out", type=Path, help="default bench/results/<gpu>/")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # smoke test, any device
    args = p.parse_args(argv)
    if unknown := set(args.providers) - set(PROVIDERS):
        p.error(f"unknown providers {sorted(unknown)}; choose from {','.join(PROVIDERS)}")
    if not (torch.cuda.is_available() or args.tiny):
        sys.exit("bench_train_step.py needs a CUDA GPU (--tiny runs anywhere)")
    from transformers import LlamaConfig
    from bench_ops import device_name, results_dir  # imports fused_ops_py: after --help

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    out = Path(args.out or results_dir(device_name(device)))
    out.mkdir(parents=True, exist_ok=True)
    dynamo = torch._dynamo.config  # newer name first
    knob = "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit"
    setattr(dynamo, knob, max(64, getattr(dynamo, knob)))
    shape = dict(TINY if args.tiny else FULL)
    batch, seq, prompt_len, new_tokens = (shape.pop(k) for k in ("batch", "seq", "prompt", "new_tokens"))
    versions = (f"torch {torch.__version__}, transformers {version('transformers')}, liger_kernel "
                f"{version('liger_kernel')}, fused_ops_py {getattr(sys.modules['fused_ops_py'], '__version__', '?')}")
    clock = "CUDA events" if device.type == "cuda" else "wall clock"
    header = (f"{device_name(device)}; {versions}. Llama {shape}, sdpa, bf16, seed 0; batch {batch} x {seq}; "
              f"loss.backward(), no optimizer; median of {args.steps} steps ({clock}) after {args.warmup} warm-up; "
              f"peak_gib: max_memory_allocated over them. Decode: greedy, batch 1, prompt {prompt_len}, "
              f"{new_tokens} new tokens, ms per generate(), median of {args.decode_runs} after 1 warm-up.")
    print(header, flush=True)
    if device.type == "cuda":
        from bench_cross_entropy import warm_up_the_gpu
        warm_up_the_gpu()
    rows = []
    for vocab in args.vocabs:
        config = lambda use_cache: LlamaConfig(  # noqa: E731
            vocab_size=vocab, max_position_embeddings=4096, attn_implementation="sdpa", use_cache=use_cache, **shape)
        gen = torch.Generator(device=device).manual_seed(0)  # the same inputs for every row
        ids = torch.randint(0, vocab, (batch, seq), device=device, generator=gen)
        prompt = torch.randint(0, vocab, (1, prompt_len), device=device, generator=gen)
        train = lambda row: train_body(row, args, config(False), device, ids, ids)  # noqa: E731
        ref = {}  # decode_eager's tokens
        decode = lambda row: decode_body(row, args, config(True), device, prompt, new_tokens, ref)  # noqa: E731
        case = []  # this vocab's rows: a row's targets are set once the rows it is checked against are done
        for provider, body in [(p, train) for p in args.providers] + [
                (p, decode) for p in ("decode_eager", "decode_patch") if args.decode]:
            case.append(run_row(dict(vocab=vocab, provider=provider), body, device))
            set_targets(case)
            print(" ".join(f"{k}={v}" for k, v in case[-1].items() if v != ""), flush=True)
            write_outputs(rows + case, out, header)
        rows += case
    met, missed = write_outputs(rows, out, header)
    print(f"{met} met, {missed} missed; wrote {out / 'train_step.csv'} and {out / 'train_step.md'}", flush=True)


if __name__ == "__main__":
    main()
