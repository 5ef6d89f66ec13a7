#!/usr/bin/env python3
"""The C CPU kernels against torch's CPU kernels: every op, forward and
backward, fp32 and bf16, on all of torch's threads and on one, eager and
fused timed in turns in one process (a slow minute of a shared VM hits both).
Writes cpu.csv and cpu.md under --out (default bench/results/cpu-x86-64/).

    python bench/bench_cpu.py                          # the full grid
    python bench/bench_cpu.py --ops layer_norm --dtypes bf16 --shapes 4096x1024
    FUSED_OPS_PY_CPU_ISA=avx2 python bench/bench_cpu.py --out /tmp/avx2

GB/s is over the fewest bytes the op must move (bench_ops.min_bytes), set
against a torch copy of the same bytes measured in the run (half read, half
written; a tensor that fits the caches copies faster than one that does
not): a row where torch reaches EXEMPT_PCT of that ceiling is exempt from
the target, since no kernel can beat it by much."""

import argparse
import csv
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_ops as b  # noqa: E402

import fused_ops_py as fo  # noqa: E402
from fused_ops_py._ffi import ffi, lib  # noqa: E402

EPS = b.EPS
EXEMPT_PCT = 90.0
DROPOUT_P = 0.1
GEMMA_OFFSET = 1.0


def eager_add_layer_norm(x, r, w, bias):
    return torch.nn.functional.layer_norm(x + r, x.shape[-1:], w, bias, EPS)


def eager_add_layer_norm_dropout(x, r, w, bias):
    h = torch.nn.functional.dropout(x, DROPOUT_P) + r
    return torch.nn.functional.layer_norm(h, x.shape[-1:], w, bias, EPS)


def eager_gemma_rms_norm(x, w):
    return torch.nn.functional.rms_norm(x, x.shape[-1:], None, EPS) * (GEMMA_OFFSET + w)


def eager_cross_entropy(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)


EAGER = dict(
    b.EAGER,
    add_layer_norm=eager_add_layer_norm,
    add_layer_norm_dropout=eager_add_layer_norm_dropout,
    gemma_rms_norm=eager_gemma_rms_norm,
    cross_entropy=eager_cross_entropy,
)
FUSED = dict(
    b.FUSED,
    add_layer_norm=lambda x, r, w, bias: fo.fused_add_layer_norm(x, r, w, bias, EPS)[0],
    add_layer_norm_dropout=lambda x, r, w, bias: fo.fused_add_layer_norm(x, r, w, bias, EPS, dropout_p=DROPOUT_P)[0],
    gemma_rms_norm=lambda x, w: fo.fused_rms_norm(x, w, EPS, offset=GEMMA_OFFSET),
    cross_entropy=lambda logits, target: fo.fused_cross_entropy(logits, target),
)
OPS = (
    "bias_scale_relu",
    "relu",
    "square",
    "reduce_sum",
    "layer_norm",
    "add_layer_norm",
    "add_layer_norm_dropout",
    "rms_norm",
    "add_rms_norm",
    "gemma_rms_norm",
    "swiglu",
    "geglu",
    "rope",
    "rope_interleaved",
    "cross_entropy",
)
SHAPES = ((4096, 1024), (16384, 4096))
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def make_inputs(op, m, n, dtype):
    if op == "cross_entropy":  # m tokens over a vocabulary of n
        gen = torch.Generator().manual_seed(0)
        logits = torch.randn(m, n, dtype=dtype, generator=gen).requires_grad_()
        return (logits, torch.randint(0, n, (m,), generator=gen)), torch.ones((), dtype=dtype)
    if op in ("add_layer_norm", "add_layer_norm_dropout"):
        (x, w, bias), dy = b.make_inputs("layer_norm", m, n, dtype, "cpu")
        r = torch.randn_like(x).requires_grad_()
        return (x, r, w, bias), dy
    return b.make_inputs("rms_norm" if op == "gemma_rms_norm" else op, m, n, dtype, "cpu")


def bytes_moved(op, direction, m, n, itemsize):
    if op == "cross_entropy":  # logits in (fwd); logits in, and again with their gradient out (fwdbwd)
        return (1 if direction == "fwd" else 3) * m * n * itemsize
    if op.startswith("add_layer_norm"):
        return b.min_bytes("add_rms_norm", direction, m, n, itemsize) + n * itemsize
    return b.min_bytes("rms_norm" if op == "gemma_rms_norm" else op, direction, m, n, itemsize)


def directions(op, wanted):
    """reduce_sum has no backward kernel (its gradient is an expanded view);
    fused cross-entropy's backward runs once a forward (it scales the
    gradient forward saved in place), so it is timed with its forward."""
    if op == "reduce_sum":
        return [d for d in wanted if d == "fwd"]
    if op == "cross_entropy":
        return [d if d != "bwd" else "fwdbwd" for d in wanted]
    return wanted


def median_ms(call, budget_s):
    call()
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 200):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def copy_ceiling_gbs(nbytes, budget_s):
    """GB/s of a torch copy that moves nbytes (reads half, writes half)."""
    src = torch.empty(max(nbytes // 8, 1), dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / median_ms(lambda: dst.copy_(src), budget_s) / 1e6


def misses_target(row):
    """1.0x torch on many threads, 0.9x on one, unless torch is at the copy ceiling."""
    return not row["exempt"] and row["speedup"] < (1.0 if row["threads"] > 1 else 0.9)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--shapes", default=",".join(f"{m}x{n}" for m, n in SHAPES))
    p.add_argument("--directions", default="fwd,bwd")
    p.add_argument("--threads", default=f"{torch.get_num_threads()},1", help="comma list of thread counts")
    p.add_argument("--rounds", type=int, default=3, help="eager and fused timed in turns, this many times")
    p.add_argument("--budget-s", type=float, default=0.3, help="seconds of calls a median takes")
    p.add_argument(
        "--append", action="store_true", help="keep the rows of --out's cpu.csv that this run does not measure again"
    )
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "cpu-x86-64")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    many = torch.get_num_threads()
    isa = ffi.string(lib.fo_cpu_isa()).decode()
    ceilings = {}  # (bytes, threads): GB/s, measured once

    def ceiling(nbytes, t):
        if (nbytes, t) not in ceilings:
            ceilings[nbytes, t] = copy_ceiling_gbs(nbytes, args.budget_s)
        return ceilings[nbytes, t]

    big = 256 << 20
    meta = (
        f"{platform.machine()} {os.cpu_count()} CPUs ({platform.processor() or 'cpu'}); torch "
        f"{torch.__version__}; fused_ops_py {fo.__version__}, CPU kernels {isa}; copy of 256 MiB "
        + ", ".join(
            f"{(torch.set_num_threads(t), ceiling(big, t))[1]:.1f} GB/s on {t} thread{'s' * (t > 1)}" for t in threads
        )
    )
    torch.set_num_threads(many)
    print(meta, flush=True)
    rows = []
    for op in args.ops.split(","):
        for dname in args.dtypes.split(","):
            for m, n in shapes:
                inputs, dy = make_inputs(op, m, n, DTYPES[dname])
                for direction in directions(op, args.directions.split(",")):
                    calls = {
                        name: b.make_call(fns[op], inputs, dy, direction)
                        for name, fns in (("eager", EAGER), ("fused", FUSED))
                    }
                    for t in threads:
                        torch.set_num_threads(t)
                        times = {"eager": [], "fused": []}
                        for _ in range(args.rounds):
                            for name, call in calls.items():
                                times[name].append(median_ms(call, args.budget_s))
                        eager, fused = (statistics.median(times[k]) for k in ("eager", "fused"))
                        nbytes = bytes_moved(op, direction, m, n, DTYPES[dname].itemsize)
                        pct_copy = round(100 * nbytes / eager / 1e6 / ceiling(nbytes, t), 1)
                        row = dict(
                            op=op,
                            dir=direction,
                            dtype=dname,
                            shape=f"{m}x{n}",
                            threads=t,
                            isa=isa,
                            eager_ms=round(eager, 4),
                            fused_ms=round(fused, 4),
                            speedup=round(eager / fused, 3),
                            eager_gbs=round(nbytes / eager / 1e6, 2),
                            fused_gbs=round(nbytes / fused / 1e6, 2),
                            eager_pct_copy=pct_copy,
                            exempt=pct_copy >= EXEMPT_PCT,
                        )
                        rows.append(row)
                        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                    torch.set_num_threads(many)
    args.out.mkdir(parents=True, exist_ok=True)
    key = lambda r: (r["op"], r["dir"], r["dtype"], r["shape"], str(r["threads"]))  # noqa: E731
    if args.append and (args.out / "cpu.csv").exists():
        with open(args.out / "cpu.csv") as f:
            measured = {key(r) for r in rows}
            kept = [r for r in csv.DictReader(f) if key(r) not in measured]
        kept = [
            dict(r, threads=int(r["threads"]), speedup=float(r["speedup"]), exempt=r.get("exempt") == "True")
            for r in kept
        ]
        rows = kept + rows
        rows.sort(
            key=lambda r: (OPS.index(r["op"]), list(DTYPES).index(r["dtype"]), r["shape"], r["dir"], -r["threads"])
        )
    with open(args.out / "cpu.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    slower = [r for r in rows if misses_target(r)]
    exempt = sum(r["exempt"] for r in rows)
    summary = (
        f"{len(rows) - len(slower) - exempt} of {len(rows)} rows meet their target (1.0x on {many} threads, "
        f"0.9x on 1), {exempt} are exempt (torch at {EXEMPT_PCT:.0f}% or more of the copy ceiling for its bytes)"
    )
    with open(args.out / "cpu.md", "w") as f:
        f.write(
            f"# The CPU kernels against torch's\n\n{meta}. ms a call (median of {args.rounds} turns); speedup = "
            "torch's time over fused's; torch % of copy: torch's GB/s over a torch copy of the same bytes in "
            f"this run.\n\n{summary}; {len(slower)} miss it (marked **).\n\n"
            "| op | dir | dtype | shape | threads | torch ms | fused ms | speedup | fused GB/s "
            "| torch % of copy |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|\n"
        )
        for r in rows:
            speedup = f"**{r['speedup']}**" if misses_target(r) else str(r["speedup"])
            pct = f"{r['eager_pct_copy']} (exempt)" if r["exempt"] else str(r["eager_pct_copy"])
            f.write(
                f"| {r['op']} | {r['dir']} | {r['dtype']} | {r['shape']} | {r['threads']} | {r['eager_ms']} | "
                f"{r['fused_ms']} | {speedup} | {r['fused_gbs']} | {pct} |\n"
            )
    print(f"{summary}; wrote {args.out}/cpu.csv and .md")
    return rows


if __name__ == "__main__":
    main()
