"""How the CPU kernels scale with threads: each fused op and direction timed
on one thread and on torch.get_num_threads() threads (torch.set_num_threads
in between, so the same process, inputs and allocator state), in turns, the
median of each. A markdown table to stdout.
    python bench/cpu_threads.py [ROWSxCOLS]          # default 4096x1024, fp32
The absolute times of a shared VM move from hour to hour; the ratio within
one run is the number to read."""

import statistics
import sys
import time

import torch

sys.argv, argv = sys.argv[:1], sys.argv[1:]
import bench_ops as b  # noqa: E402

m, n = (int(v) for v in (argv[0] if argv else "4096x1024").split("x"))
many = torch.get_num_threads()
rounds, calls = 5, 5


def median_ms(call, threads):
    torch.set_num_threads(threads)
    call()  # warm
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


print(f"fused_ops_py CPU kernels, fp32 {m} x {n}: ms a call (median), 1 thread against {many}\n")
print(f"| op | dir | 1 thread | {many} threads | speedup |")
print("|---|---|---:|---:|---:|")
for op, directions in b.OPS.items():
    inputs, dy = b.make_inputs(op, m, n, torch.float32, "cpu")
    for direction in directions:
        call = b.make_call(b.provider_fn("fused", op, False), inputs, dy, direction)
        one, several = [], []
        for _ in range(rounds):  # in turns: a slow minute of the VM hits both
            one.append(median_ms(call, 1))
            several.append(median_ms(call, many))
        t1, tn = statistics.median(one), statistics.median(several)
        print(f"| {op} | {direction} | {t1:.3g} | {tn:.3g} | {t1 / tn:.2f} |", flush=True)
torch.set_num_threads(many)
