#!/usr/bin/env python3
"""The performance targets of fused-ops-py, checked on a bench_ops.py run's
own data (results.csv): which rows meet each, and every row that misses,
with its numbers. Writes targets.md beside results.csv and prints the
verdicts. Nothing here times anything.

    python bench/targets.py bench/results/h100

The targets (GB/s over the fewest bytes, CUDA-graph kernel time; "large" is
a tensor of 32 MiB or more, counted as x's rows x cols x itemsize):
  forward      every op's fwd, large: >= 2800 GB/s and no peer faster
  backward     LayerNorm, RMSNorm, add-RMSNorm, bias_scale_relu bwd, large:
               >= 2500 GB/s, and in bf16 at least twice every peer
  small        every row from 1M elements up (any direction): no peer faster
               in kernel time, nor in call time (the Python call, autograd in)
  memory       fwdbwd: fused's peak extra memory no higher than eager torch's
  no peer wins every row of the summary, tiny ones too: no peer faster in
               kernel time

Where copy_by_size.csv (bench/copy_by_size.py) lies beside results.csv, each
forward and backward miss also shows the GB/s it needed (the target, or the
peer's rate times the ratio asked) and what a copy of the bytes the fused
kernel moves reaches at that size; a miss that needed more than that copy is
counted "beyond the copy": no kernel that reads and writes those bytes once
makes it.
"""

import argparse
import csv
import math
from pathlib import Path

FORWARD_GBS, BACKWARD_GBS, BACKWARD_PEER_RATIO = 2800.0, 2500.0, 2.0
LARGE_BYTES = 32 * 2**20
MIN_ELEMENTS = 1 << 20
BACKWARD_OPS = ("layer_norm", "rms_norm", "add_rms_norm", "bias_scale_relu")
ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}  # not bench_ops.DTYPES: no torch import here
NOISE = 0.02  # a peer ahead by less than this is within the spread of two timings
# Their fused backward reads a 1-bit mask instead of an x-sized input: it
# moves fewer bytes than the rows count, and may pass the copy's rate.
MASK_BACKWARD_OPS = ("relu", "bias_scale_relu")


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def cases(results_dir):
    """[(fused row, {peer: row})] of the rows whose check passed."""
    groups = {}
    with open(Path(results_dir) / "results.csv") as f:
        for row in csv.DictReader(f):
            key = (row["op"], row["direction"], int(row["rows"]), int(row["cols"]), row["dtype"])
            groups.setdefault(key, {})[row["provider"]] = row
    out = []
    for providers in groups.values():
        fused = providers.pop("fused", None)
        peers = {p: r for p, r in providers.items() if r["check"] == "ok" and not math.isnan(time_of(r, "kernel"))}
        if fused and fused["check"] == "ok":
            out.append((fused, peers))
    return out


def time_of(row, kind):
    """kernel_ms (call_ms where no graph was captured) or call_ms."""
    t = number(row["kernel_ms"]) if kind == "kernel" else math.nan
    return number(row["call_ms"]) if math.isnan(t) else t


def fastest_peer(peers, kind):
    timed = [(time_of(r, kind), p, r) for p, r in peers.items() if not math.isnan(time_of(r, kind))]
    return min(timed, key=lambda t: t[0]) if timed else None


def peer_ratio(fused, peers, kind):
    """The fastest peer's time over fused's (above 1: fused is faster); inf
    where no peer has the case."""
    best = fastest_peer(peers, kind)
    return best[0] / time_of(fused, kind) if best else math.inf


def describe(fused, peers, kind="kernel"):
    best = fastest_peer(peers, kind)
    ratio = peer_ratio(fused, peers, kind)
    shape = f"{fused['rows']}x{fused['cols']}"
    peer = (
        f"{best[1]} {number(best[2]['gbs']):.0f}"
        if best and kind == "kernel"
        else (f"{best[1]} {best[0] * 1e3:.1f} us" if best else "")
    )
    mine = f"{number(fused['gbs']):.0f}" if kind == "kernel" else f"{time_of(fused, kind) * 1e3:.1f} us"
    shown = f"{ratio:.2f}" if math.isfinite(ratio) else ""
    return f"| {fused['op']} | {fused['direction']} | {shape} | {fused['dtype']} | {mine} | {peer} | {shown} |"


def read_copy_table(results_dir):
    """[(bytes_moved, gbs)] sorted, from copy_by_size.csv; None without one."""
    path = Path(results_dir) / "copy_by_size.csv"
    if not path.exists():
        return None
    with open(path) as f:
        return sorted((int(r["bytes_moved"]), float(r["gbs"])) for r in csv.DictReader(f))


def copy_gbs_at(table, moved):
    """The copy's GB/s at `moved` bytes, interpolated in log(bytes) between
    the measured sizes; the end values past either end."""
    if moved <= table[0][0]:
        return table[0][1]
    for (b0, g0), (b1, g1) in zip(table, table[1:]):
        if moved <= b1:
            t = (math.log(moved) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return g0 + t * (g1 - g0)
    return table[-1][1]


def copy_limit_gbs(fused, table):
    """GB/s, over the row's counted bytes, of a kernel moving the bytes the
    fused kernel moves as fast as a copy of that size does."""
    counted = number(fused["gbs"]) * time_of(fused, "kernel") * 1e6
    moved = counted
    if fused["op"] in MASK_BACKWARD_OPS and fused["direction"] == "bwd":
        elements = int(fused["rows"]) * int(fused["cols"])
        moved = counted - elements * ITEMSIZE[fused["dtype"]] + elements / 8
    return copy_gbs_at(table, moved) * counted / moved


def needed_gbs(peers, floor, peer_ratio_asked):
    """The GB/s a row needs: the floor, or the fastest peer's rate times the
    ratio asked, whichever is higher."""
    best = fastest_peer(peers, "kernel")
    return max(floor, peer_ratio_asked * number(best[2]["gbs"])) if best else floor


def evaluate(results_dir):
    """{target: (checked, [failing rows as markdown], near misses, misses
    beyond the copy)}."""
    verdicts = {
        name: [0, [], 0, 0]
        for name in ("forward", "backward", "small (kernel)", "small (call)", "memory", "no peer wins")
    }
    table = read_copy_table(results_dir)

    def record(name, ok, line, ratio=math.nan):
        verdicts[name][0] += 1
        if not ok:
            verdicts[name][1].append(line)
            if ratio >= 1 - NOISE:
                verdicts[name][2] += 1

    def record_bandwidth(name, fused, peers, floor, peer_ratio_asked):
        """A forward or backward target: the miss line gets the GB/s needed
        and the copy's at the same bytes."""
        need = needed_gbs(peers, floor, peer_ratio_asked)
        ok = number(fused["gbs"]) >= floor and peer_ratio(fused, peers, "kernel") >= peer_ratio_asked
        limit = copy_limit_gbs(fused, table) if table else math.nan
        shown_limit = f"{limit:.0f}" if table else ""
        record(name, ok, describe(fused, peers) + f" {need:.0f} | {shown_limit} |")
        if not ok and need > limit:
            verdicts[name][3] += 1

    for fused, peers in cases(results_dir):
        op, direction, dtype = fused["op"], fused["direction"], fused["dtype"]
        elements = int(fused["rows"]) * int(fused["cols"])
        large = elements * ITEMSIZE[dtype] >= LARGE_BYTES
        ratio = peer_ratio(fused, peers, "kernel")
        if direction == "fwd" and large:
            record_bandwidth("forward", fused, peers, FORWARD_GBS, 1.0)
        if direction == "bwd" and large and op in BACKWARD_OPS:
            record_bandwidth("backward", fused, peers, BACKWARD_GBS, BACKWARD_PEER_RATIO if dtype == "bf16" else 1.0)
        if elements >= MIN_ELEMENTS:
            record("small (kernel)", ratio >= 1, describe(fused, peers), ratio)
            call_ratio = peer_ratio(fused, peers, "call")
            record("small (call)", call_ratio >= 1, describe(fused, peers, "call"), call_ratio)
        if direction == "fwdbwd" and "eager" in peers:
            mine, theirs = number(fused["peak_extra_mib"]), number(peers["eager"]["peak_extra_mib"])
            if not (math.isnan(mine) or math.isnan(theirs)):
                shape = f"{fused['rows']}x{fused['cols']}"
                record(
                    "memory",
                    mine <= theirs,
                    f"| {op} | fwdbwd | {shape} | {dtype} | {mine:.0f} MiB | eager {theirs:.0f} MiB | |",
                )
        record("no peer wins", ratio >= 1, describe(fused, peers), ratio)
    return verdicts


def by_op(results_dir):
    """Markdown rows, one per op, direction and dtype over the shapes from
    1M elements up: on how many fused is fastest, its median GB/s, and the
    median and worst of (fastest peer's time / fused's)."""
    groups = {}
    for fused, peers in cases(results_dir):
        if int(fused["rows"]) * int(fused["cols"]) < MIN_ELEMENTS:
            continue
        ratio = peer_ratio(fused, peers, "kernel")
        key = (fused["op"], fused["direction"], fused["dtype"])
        groups.setdefault(key, []).append((ratio, number(fused["gbs"])))
    median = lambda v: sorted(v)[len(v) // 2]
    lines = [
        "| op | dir | dtype | shapes | fused fastest | fused GB/s (median) | peer time / fused: median | worst |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    order = list(ITEMSIZE)  # bf16, fp16, fp32: a stable sort keeps the ops' order
    for (op, direction, dtype), v in sorted(groups.items(), key=lambda kv: order.index(kv[0][2])):
        ratios = [r for r, _ in v]
        lines.append(
            f"| {op} | {direction} | {dtype} | {len(v)} | {sum(r >= 1 for r in ratios)} "
            f"| {median([g for _, g in v]):.0f} | {median(ratios):.2f} | {min(ratios):.2f} |"
        )
    return lines


def markdown(verdicts, results_dir):
    measured_copy = read_copy_table(results_dir) is not None
    lines = [
        f"# Targets, checked on {Path(results_dir).name}/results.csv",
        "",
        "Generated by `python bench/targets.py`; the targets are in its docstring. "
        f"Near misses: a peer ahead by less than {NOISE:.0%}, within the spread of "
        "two timings of one kernel.",
        "",
        "Beyond the copy: a forward or backward miss that needed more GB/s than a "
        "copy of the same bytes reaches at that size (copy_by_size.csv"
        + ("" if measured_copy else ": not measured for these results")
        + ").",
        "",
        "| target | rows checked | met | missed | of which near misses | of which beyond the copy |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, (checked, failing, near, beyond) in verdicts.items():
        shown = beyond if measured_copy and name in ("forward", "backward") else ""
        lines.append(f"| {name} | {checked} | {checked - len(failing)} | {len(failing)} | {near} | {shown} |")
    lines += ["", "## By op, from 1M elements up", "", *by_op(results_dir)]
    for name, (checked, failing, _, _) in verdicts.items():
        if not failing:
            continue
        time_kind = "call" if name == "small (call)" else "GB/s"
        header = f"| op | dir | shape | dtype | fused {time_kind} | fastest peer | peer time / fused |"
        rule = "|---|---|---|---|---:|---|---:|"
        if name in ("forward", "backward"):
            header += " needed GB/s | copy of these bytes, GB/s |"
            rule += "---:|---:|"
        lines += ["", f"## {name}: missed", "", header, rule, *failing]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    args = parser.parse_args(argv)
    verdicts = evaluate(args.results_dir)
    (Path(args.results_dir) / "targets.md").write_text(markdown(verdicts, args.results_dir))
    for name, (checked, failing, near, beyond) in verdicts.items():
        print(
            f"{name:15s} {checked - len(failing):4d} of {checked:4d} met"
            f" ({near} of the misses within {NOISE:.0%}"
            + (f", {beyond} beyond the copy)" if name in ("forward", "backward") else ")")
        )


if __name__ == "__main__":
    main()
