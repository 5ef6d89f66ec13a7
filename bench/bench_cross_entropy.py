"""Forward + backward of fused_ops_py's cross-entropy ops against their peers on
one CUDA GPU, timed by triton.testing.do_bench (median, L2 flushed each run).

--part ce: fused_cross_entropy against F.cross_entropy (eager), torch.compile
of it and Liger's liger_cross_entropy, N in {4096, 16384} x V in {32000,
128256, 256000}, bf16 and fp32; GB/s over 2*N*V*elem; checked against eager in
fp32 upcast. --part lce: fused_linear_cross_entropy against F.linear +
F.cross_entropy (eager), torch.compile of that, Liger's fused linear cross
entropy and, where torch has it, chunked F.linear_cross_entropy (torch_lce);
N in {8192, 16384}, H 4096, V in {32000, 128256}, bf16; the extra memory of
one forward + backward; checked against eager. A failing provider is an "oom"
or "error: ..." note in its row. TARGETS are stated above each table.

    python bench/bench_cross_entropy.py                     # both parts
    python bench/bench_cross_entropy.py --part ce --quick   # smallest shape per part
    python bench/bench_cross_entropy.py --part ce --providers fused --out /tmp/ab  # A/B of a library

Writes cross_entropy.csv and cross_entropy.md under --out (default
bench/results/<gpu>/), rewritten after every shape.
"""

import argparse
import csv
import gc
import importlib.metadata
import inspect
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
CE_SHAPES = [(n, v) for n in (4096, 16384) for v in (32000, 128256, 256000)]
LCE_SHAPES = [(n, 4096, v) for n in (8192, 16384) for v in (32000, 128256)]
CE_PROVIDERS = ["fused", "eager", "compile", "liger"]
# eager first: its loss and gradients are the others' reference
LCE_PROVIDERS = ["eager", "fused", "compile", "liger"] + (["torch_lce"] if hasattr(F, "linear_cross_entropy") else [])
CEILING_GBS = 3000.0  # device-to-device copy on this H100 (shared/GPU.md)
TARGETS = {
    "ce_gbps": 2500.0,
    "ce_gbps_min_n": 16384,
    "ce_gbps_min_v": 32000,  # fused GB/s at these sizes
    "ce_vs_best_peer": 1.25,  # the fastest peer's time / fused's, at least, at every shape
    "lce_extra_of_fp32_logits": 1 / 8,  # fused extra memory at most this share of N*V*4 bytes
    # lce at every shape: fused time <= every peer's (compile's too); fused extra <= every peer's
}
CHECK_ROWS = 1024  # rows of the fp32 reference at a time
DEVICE = "cuda"
FIELDS = [
    "part",
    "n",
    "h",
    "v",
    "dtype",
    "provider",
    "ms",
    "gbps",
    "fraction_of_ceiling",
    "tflops",
    "extra_mib",
    "extra_bound_mib",
    "vs_best_peer",
    "target_gbps_met",
    "target_ratio_met",
    "target_time_met",
    "target_mem_met",
    "target_mem_vs_peers_met",
    "loss_rel_err",
    "grad_max_abs_err",
    "grad_rel_err",
    "note",
]
TARGET_KEYS = [k for k in FIELDS if k.startswith("target_")]


def ce_eager(logits, target):
    return F.cross_entropy(logits, target)


def lce_eager(x, weight, target):
    return F.cross_entropy(F.linear(x, weight), target)


_compiled = {}


def provider_fn(part, provider):
    """(fn, note); the imports are here so that one that fails is one row's error."""
    eager = ce_eager if part == "ce" else lce_eager
    if provider == "fused":
        import fused_ops_py as fo

        return (fo.fused_cross_entropy if part == "ce" else fo.fused_linear_cross_entropy), ""
    if provider == "eager":
        return eager, ""
    if provider == "compile":  # specialised to every shape: the strongest compile baseline
        if eager not in _compiled:
            _compiled[eager] = torch.compile(eager, dynamic=False)
        return _compiled[eager], ""
    if provider == "liger" and part == "ce":
        from liger_kernel.transformers.functional import liger_cross_entropy

        return liger_cross_entropy, ""
    if provider == "liger":  # 0.8.5's functional takes (input, weight, target), its
        # LigerFusedLinearCrossEntropyLoss.forward (lin_weight, _input, target): keywords
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        return lambda x, w, t: liger_fused_linear_cross_entropy(input=x, weight=w, target=t), ""
    # torch_lce: its chunked path, however this torch spells it
    params = inspect.signature(F.linear_cross_entropy).parameters
    options = getattr(torch.nn, "LinearCrossEntropyOptions", None)
    if "options" in params and options is not None:
        kwargs, note = {"options": options()}, "options=LinearCrossEntropyOptions()"
    elif "chunking_strategy" in params:
        kwargs, note = {"chunking_strategy": "batch"}, "chunking_strategy='batch'"
    else:
        kwargs, note = {}, "no chunked option in this torch"
    return lambda x, w, t: F.linear_cross_entropy(x, w, t, **kwargs), note


def bench_ms(call, grads, args):
    from triton.testing import do_bench

    return do_bench(call, warmup=args.warmup_ms, rep=args.rep_ms, grad_to_none=grads, return_mode="median")


def run_row(row, body):
    """Fills row by body(row); an error becomes the row's note, never raised."""
    try:
        body(row)
    except torch.cuda.OutOfMemoryError:
        row["note"] = "oom"
    except Exception as error:
        row["note"] = f"error: {type(error).__name__}: {' '.join(str(error).split())}"[:300]
    gc.collect()
    torch.cuda.empty_cache()
    row.update({k: float(f"{v:.4g}") for k, v in row.items() if isinstance(v, float)})
    print(" ".join(f"{k}={v}" for k, v in row.items() if v != ""), flush=True)
    return row


def ce_body(row, args):
    fn, row["note"] = provider_fn("ce", row["provider"])
    n, v = row["n"], row["v"]
    gen = torch.Generator(device=DEVICE).manual_seed(0)  # the same inputs for every provider
    logits = torch.randn(n, v, dtype=DTYPES[row["dtype"]], device=DEVICE, generator=gen).requires_grad_()
    target = torch.randint(0, v, (n,), device=DEVICE, generator=gen)
    # the check: a clone for Liger, which overwrites its input with the gradient
    x = logits.detach().clone().requires_grad_() if row["provider"] == "liger" else logits
    loss = fn(x, target)
    loss.backward()
    ref_sum, grad_err = 0.0, 0.0
    for start in range(0, n, CHECK_ROWS):  # eager in fp32, a chunk of rows at a time
        rows, t = logits.detach()[start : start + CHECK_ROWS].float(), target[start : start + CHECK_ROWS]
        ref_sum += F.cross_entropy(rows, t, reduction="sum").item()
        ref_grad = torch.softmax(rows, -1)
        ref_grad[torch.arange(len(t), device=t.device), t] -= 1  # no target is ignored here
        grad_err = max(grad_err, (x.grad[start : start + CHECK_ROWS].float() - ref_grad / n).abs().max().item())
    row["loss_rel_err"], row["grad_max_abs_err"] = abs(loss.item() * n / ref_sum - 1), grad_err
    del x, loss, rows, ref_grad
    logits.grad = None
    row["ms"] = bench_ms(lambda: fn(logits, target).backward(), [logits], args)
    row["gbps"] = 2 * n * v * logits.element_size() / row["ms"] / 1e6
    row["fraction_of_ceiling"] = row["gbps"] / CEILING_GBS


def lce_body(row, ref, args):
    fn, row["note"] = provider_fn("lce", row["provider"])
    (n, h, v), gen = (row["n"], row["h"], row["v"]), torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(n, h, dtype=torch.bfloat16, device=DEVICE, generator=gen).requires_grad_()
    weight = (
        torch.randn(v, h, dtype=torch.bfloat16, device=DEVICE, generator=gen) * h**-0.5
    ).requires_grad_()  # logits about N(0, 1), as a trained head gives
    target = torch.randint(0, v, (n,), device=DEVICE, generator=gen)
    loss = fn(x, weight, target)  # the check; compile compiles here, before anything is measured
    loss.backward()
    if row["provider"] == "eager":
        ref.update(loss=loss.item(), grads=(x.grad, weight.grad))
    if ref:  # none if eager failed
        row["loss_rel_err"] = abs(loss.item() / ref["loss"] - 1)
        row["grad_rel_err"] = max(
            ((g.float() - r.float()).abs().max() / r.float().abs().max()).item()
            for g, r in zip((x.grad, weight.grad), ref["grads"])
        )
    del loss
    x.grad = weight.grad = None
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(x, weight, target).backward()
    torch.cuda.synchronize()
    kept = sum(g.numel() * g.element_size() for g in (x.grad, weight.grad) if g is not None)
    row["extra_mib"] = (torch.cuda.max_memory_allocated() - base - kept) / 2**20
    row["ms"] = bench_ms(lambda: fn(x, weight, target).backward(), [x, weight], args)
    row["tflops"] = 6 * n * h * v / row["ms"] / 1e9


def set_targets(case):
    """Sets and returns the fused row's target columns, from its shape's rows; a fused
    that failed misses them all. None where fused did not run."""
    fused = next((r for r in case if r["provider"] == "fused"), None)
    if fused is None:
        return None
    peers, ok = [r for r in case if r is not fused], bool(fused.get("ms"))
    best_ms = min([r["ms"] for r in peers if r.get("ms")], default=None)
    if fused["part"] == "ce":
        if best_ms:
            fused["vs_best_peer"] = round(best_ms / fused["ms"], 3) if ok else ""
            fused["target_ratio_met"] = ok and fused["vs_best_peer"] >= TARGETS["ce_vs_best_peer"]
        if fused["n"] >= TARGETS["ce_gbps_min_n"] and fused["v"] >= TARGETS["ce_gbps_min_v"]:
            fused["target_gbps_met"] = ok and fused["gbps"] >= TARGETS["ce_gbps"]
        return fused
    fused["extra_bound_mib"] = round(fused["n"] * fused["v"] * 4 * TARGETS["lce_extra_of_fp32_logits"] / 2**20, 1)
    fused["target_mem_met"] = ok and fused["extra_mib"] <= fused["extra_bound_mib"]
    best_extra = min([r["extra_mib"] for r in peers if r.get("extra_mib", "") != ""], default=None)
    if best_ms:
        fused["target_time_met"] = ok and fused["ms"] <= best_ms
    if best_extra is not None:
        fused["target_mem_vs_peers_met"] = ok and fused["extra_mib"] <= best_extra
    return fused


def count(rows):
    checks = [r.get(k) for r in rows if r["provider"] == "fused" for k in TARGET_KEYS]
    return checks.count(True), checks.count(False)


def table(rows):
    """A met/missed line, then a markdown row per provider and shape: the columns these rows fill."""
    met, missed = count(rows)
    columns = [k for k in FIELDS[1:] if any(r.get(k, "") != "" for r in rows)]
    cell = lambda v: ("yes" if v else "**no**") if isinstance(v, bool) else str(v).replace("|", "/")
    return [
        f"**{met} met, {missed} missed** of {met + missed} target checks.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ] + ["| " + " | ".join(cell(r.get(k, "")) for k in columns) + " |" for r in rows]


def write_outputs(rows, out, header):
    with open(out / "cross_entropy.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    about = {
        "ce": f"## fused_cross_entropy, loss.backward() of the mean loss\n\nGB/s over 2*N*V*elem bytes; "
        f"ceiling {CEILING_GBS:.0f} GB/s. Targets: fused >= {TARGETS['ce_gbps']:.0f} GB/s where N >= "
        f"{TARGETS['ce_gbps_min_n']} and V >= {TARGETS['ce_gbps_min_v']}; vs_best_peer (the fastest "
        f"peer's time / fused's) >= {TARGETS['ce_vs_best_peer']} at every shape. Errors against eager "
        "in fp32 upcast: gradient max abs (gradients are of order 1/N), loss relative. Liger "
        "overwrites the logits with their gradient: its check uses a clone.",
        "lce": "## fused_linear_cross_entropy, bf16, no bias\n\nextra_mib = peak of one forward + backward "
        "- allocated before it - input.grad and weight.grad; TFLOP/s over 6*N*H*V. Targets: fused "
        f"extra_mib <= extra_bound_mib (N*V*4 bytes * {TARGETS['lce_extra_of_fp32_logits']:g}); "
        "fused time <= every peer's, compile's too; fused extra_mib <= every peer's. Loss and "
        "gradient (max abs diff / eager's max abs) relative to eager bf16.",
    }
    lines = ["# Cross entropy, forward + backward: fused_ops_py against its peers", "", header]
    for part in ("ce", "lce"):
        if any(r["part"] == part for r in rows):
            lines += ["", about[part], ""] + table([r for r in rows if r["part"] == part])
    (out / "cross_entropy.md").write_text("\n".join(lines) + "\n")


def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not found"


def warm_up_the_gpu(seconds=2.0):
    """Matmuls for a while, so that the first case is not timed while the
    clocks still climb from idle."""
    a = torch.randn(4096, 4096, device=DEVICE, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("ce", "lce", "all"), default="all")
    p.add_argument("--quick", action="store_true", help="the smallest shape per part, short timing")
    p.add_argument("--warmup-ms", type=int, default=25)
    p.add_argument("--rep-ms", type=int, default=100)
    p.add_argument("--providers", help="comma list of those to run (default all; lce always runs eager, its reference)")
    p.add_argument("--out", type=Path, help="default bench/results/<gpu>/")
    args = p.parse_args(argv)
    chosen = set(args.providers.split(",")) if args.providers else set(CE_PROVIDERS + LCE_PROVIDERS)
    if not torch.cuda.is_available():
        sys.exit("bench_cross_entropy.py needs a CUDA GPU")
    from bench_ops import device_name, results_dir  # imports fused_ops_py: after --help

    device = torch.device("cuda", torch.cuda.current_device())
    out = Path(args.out or results_dir(device_name(device)))
    out.mkdir(parents=True, exist_ok=True)
    config = torch._dynamo.config  # one compile per shape and dtype: raise the limit (newer name first)
    knob = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, knob, max(64, getattr(config, knob)))
    if args.quick:
        args.warmup_ms, args.rep_ms = min(args.warmup_ms, 5), min(args.rep_ms, 20)
    header = (
        f"{device_name(device)}; torch {torch.__version__}, triton {version('triton')}, liger_kernel "
        f"{version('liger_kernel')}, fused_ops_py {getattr(sys.modules['fused_ops_py'], '__version__', '?')}; "
        f"do_bench median (L2 flushed), warmup {args.warmup_ms} ms, rep {args.rep_ms} ms."
    )
    print(header, flush=True)
    cases = []
    if args.part in ("ce", "all"):
        cases += [("ce", n, "", v, d) for n, v in CE_SHAPES[: 1 if args.quick else None] for d in DTYPES]
    if args.part in ("lce", "all"):
        cases += [("lce", n, h, v, "bf16") for n, h, v in LCE_SHAPES[: 1 if args.quick else None]]
    rows = []
    warm_up_the_gpu()
    for part, n, h, v, dtype in cases:
        ref = {}  # lce: eager's loss and gradients
        body = (lambda row: ce_body(row, args)) if part == "ce" else (lambda row: lce_body(row, ref, args))  # noqa: F821 (run before the del)
        case = [
            run_row(dict(part=part, n=n, h=h, v=v, dtype=dtype, provider=provider), body)
            for provider in (CE_PROVIDERS if part == "ce" else LCE_PROVIDERS)
            if provider in chosen or (part, provider) == ("lce", "eager")
        ]
        fused = set_targets(case)
        if fused:
            print("fused targets:", {k: fused[k] for k in ("vs_best_peer", *TARGET_KEYS) if k in fused}, flush=True)
        rows += case
        del ref, body
        write_outputs(rows, out, header)
    met, missed = count(rows)
    print(f"{met} met, {missed} missed; wrote {out / 'cross_entropy.csv'} and {out / 'cross_entropy.md'}")


if __name__ == "__main__":
    main()
