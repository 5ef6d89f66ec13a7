"""Where the training step of bench_train_step.py spends its GPU time: the
kernels of three steps under torch.profiler, summed by kind and divided by
three, beside the step's own time (CUDA events, median of 7, and around the
profiled steps).

    python bench/step_kernels.py                       # liger, patch, patch_compile at 32000 and 128256
    python bench/step_kernels.py --vocabs 32000 --providers patch,liger

Kinds: gemm (cuBLAS), attention (SDPA's flash and cuDNN kernels), fused_ops_py
(this library's kernels), triton (Liger's and torch.compile's), torch (torch's
own: elementwise, embedding backward, copies, memsets). Writes
train_step_kernels.csv and train_step_kernels.md under --out (default
bench/results/<gpu>/)."""

import argparse
import collections
import csv
import statistics
from pathlib import Path

import torch
from bench_train_step import FULL, build_model, prepare, run_row, timed_ms
from torch.profiler import ProfilerActivity, profile

KINDS = ["gemm", "attention", "fused_ops_py", "triton", "torch"]
FIELDS = [
    "vocab",
    "provider",
    "step_ms",
    "profiled_step_ms",
    "kernel_ms",
    "idle_ms",
    *(f"{k}_ms" for k in KINDS),
    "top_kernels",
    "note",
]
STEPS = 3


def kind(name):
    lower = name.lower()
    if any(s in lower for s in ("gemm", "nvjet", "cutlass", "xmma", "cublas")):
        return "gemm"
    if any(s in lower for s in ("flash", "fmha", "cudnn", "attention")):
        return "attention"
    if "fo::" in name:
        return "fused_ops_py"
    if name.startswith(("void ", "Memset", "Memcpy")):
        return "torch"
    return "triton"  # Triton kernels carry their bare function name


def short(name):
    """A kernel's name without namespaces and template arguments."""
    name = name.removeprefix("void ").split("<")[0].rsplit("::", 1)[-1]
    return name.split("(")[0].strip()


def profile_body(row, config, device, ids):
    model = build_model(config, device)
    model.train()
    model, loss_fn, row["note"] = prepare(row["provider"], model, ids, ids)

    def step():
        loss_fn().backward()  # noqa: F821 (step runs before the del below)
        model.zero_grad(set_to_none=True)  # noqa: F821

    for _ in range(4):  # compiles, then warms up
        step()
    row["step_ms"] = statistics.median(timed_ms(step, device) for _ in range(7))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        start.record()
        for _ in range(STEPS):
            step()
        end.record()
        torch.cuda.synchronize()
    row["profiled_step_ms"] = start.elapsed_time(end) / STEPS
    events = [e for e in trace.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_kind, by_name = collections.Counter(), collections.Counter()
    for e in events:
        by_kind[kind(e.name)] += e.device_time_total / STEPS / 1e3
        if kind(e.name) != "gemm":
            by_name[short(e.name)] += e.device_time_total / STEPS / 1e3
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    busy, start, end = 0.0, *spans[0]
    for s, e in spans[1:]:  # the union of the kernels' intervals
        if s > end:
            busy, start = busy + end - start, s
        end = max(end, e)
    busy += end - start
    row["kernel_ms"] = sum(by_kind.values())
    row["idle_ms"] = row["profiled_step_ms"] - busy / STEPS / 1e3
    row.update({f"{k}_ms": by_kind.get(k, 0.0) for k in KINDS})
    row["top_kernels"] = "; ".join(f"{n} {ms:.2f}" for n, ms in by_name.most_common(6))
    del model, loss_fn, step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocabs", type=lambda s: [int(v) for v in s.split(",")], default=[32000, 128256])
    p.add_argument("--providers", type=lambda s: s.split(","), default=["liger", "patch", "patch_compile"])
    p.add_argument("--out", type=Path, help="default bench/results/<gpu>/")
    args = p.parse_args(argv)
    from bench_cross_entropy import warm_up_the_gpu
    from bench_ops import device_name, results_dir
    from transformers import LlamaConfig

    device = torch.device("cuda", torch.cuda.current_device())
    out = Path(args.out or results_dir(device_name(device)))
    out.mkdir(parents=True, exist_ok=True)
    shape = {k: v for k, v in FULL.items() if k not in ("batch", "seq", "prompt", "new_tokens")}
    warm_up_the_gpu()  # the clocks of a loaded GPU from the first row on
    rows = []
    for vocab in args.vocabs:
        config = LlamaConfig(
            vocab_size=vocab, max_position_embeddings=4096, attn_implementation="sdpa", use_cache=False, **shape
        )
        gen = torch.Generator(device=device).manual_seed(0)
        ids = torch.randint(0, vocab, (FULL["batch"], FULL["seq"]), device=device, generator=gen)
        for provider in args.providers:
            rows.append(
                run_row(
                    dict(vocab=vocab, provider=provider), lambda row: profile_body(row, config, device, ids), device
                )
            )
            print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    with open(out / "train_step_kernels.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    header = (
        f"# Where a training step's GPU time goes\n\n{device_name(device)}; torch {torch.__version__}. "
        f"The step of train_step.md (Llama, 4 layers, batch {FULL['batch']} x {FULL['seq']}, bf16); "
        f"ms a step: the step (CUDA events, median of 7), the {STEPS} steps under torch.profiler "
        "(CUDA events around them), their kernels by kind, and idle = that step - the time some "
        "kernel runs.\n"
    )
    lines = [header, "| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v).replace("|", "/")  # noqa: E731
    lines += ["| " + " | ".join(cell(r.get(k, "")) for k in FIELDS) + " |" for r in rows]
    (out / "train_step_kernels.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'train_step_kernels.md'}")


if __name__ == "__main__":
    main()
