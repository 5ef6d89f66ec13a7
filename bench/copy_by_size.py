#!/usr/bin/env python3
"""The copy ceiling at each size: GB/s of dst.copy_(src) (bytes read plus
bytes written) for sizes from 1 MiB to 8 GiB moved, four a doubling, timed
by bench_ops.py's own timers (on CUDA triton's do_bench: median, L2 flushed
before each run). Writes copy_by_size.csv (bytes_moved, ms, gbs) to --out.

The grid's copy ceiling (bench_ops.copy_ceiling_gbs) is one copy of 2 GiB
moved. A smaller op cannot reach it: the launch, the first loads' latency
and the last wave's tail are a larger share of its time. targets.py sets
each row that misses a bandwidth target beside the copy of the same bytes
from this file, so a miss the copy itself would make is told apart from one
a kernel could close.

    python bench/copy_by_size.py --out bench/results/h100
    python bench/copy_by_size.py --device cpu --largest 64M --out /tmp/c
"""

import argparse
import csv
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_ops.py is beside this file
from bench_ops import cpu_bench, gpu_bench  # noqa: E402  (the grid's timers)

STEPS_PER_DOUBLING = 4


def parse_size(text):
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def sizes_moved(smallest, largest):
    """Bytes moved (read + write), rounded to 256 so each half is a whole
    number of 16-byte vectors: smallest * 2^(k/4) up to largest."""
    out, k = [], 0
    while True:
        moved = int(smallest * 2 ** (k / STEPS_PER_DOUBLING)) // 256 * 256
        if moved > largest:
            return out
        out.append(moved)
        k += 1


def time_copy_ms(moved, device, args):
    src = torch.empty(moved // 2, dtype=torch.uint8, device=device).random_()  # never zeros
    dst = torch.empty_like(src)
    bench = gpu_bench if device.type == "cuda" else cpu_bench
    ms = bench(lambda: dst.copy_(src), args)
    if not torch.equal(dst, src):
        raise RuntimeError(f"the copy of {moved // 2} bytes differs from its source")
    return ms


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--smallest", type=parse_size, default=parse_size("1M"))
    p.add_argument("--largest", type=parse_size, default=parse_size("8G"))
    p.add_argument("--warmup-ms", type=int, default=25)
    p.add_argument("--rep-ms", type=int, default=100)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for moved in sizes_moved(args.smallest, args.largest):
        ms = time_copy_ms(moved, device, args)
        rows.append({"bytes_moved": moved, "ms": ms, "gbs": moved / ms / 1e6})
        print(f"{moved / 2**20:10.1f} MiB moved  {ms * 1e3:10.2f} us  {rows[-1]['gbs']:8.0f} GB/s", flush=True)
    with open(args.out / "copy_by_size.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
