"""What the L2 flush between timed runs costs each provider: graph replays
of one call (as bench_ops.py's kernel_ms) timed after three kinds of flush.
  zero  writes a 256 MiB buffer, as triton.testing.do_bench (and so
        bench_ops.py) does: the L2 is left full of dirty lines, which the
        timed kernel must write back before its own data takes their place;
  read  reads that buffer: the L2 is just as cold, but its lines are clean;
  none  no flush: inputs that fit in the L2 stay there.
    python3 bench/flush_effect.py layer_norm bwd 4096x4096 bf16 fused compile liger
"""

import statistics
import sys

import torch

sys.argv, argv = sys.argv[:1], sys.argv[1:]
import bench_ops as b  # noqa: E402

op, direction, shape, dtype_name, *providers = argv
m, n = (int(v) for v in shape.split("x"))
dtype = b.DTYPES[dtype_name]
cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
sink = torch.empty((), dtype=torch.int64, device="cuda")
FLUSHES = {
    "zero": cache.zero_,
    "read": lambda: torch.sum(cache, dim=0, dtype=torch.int64, out=sink),
    "none": lambda: None,
}
RUNS = 200


def timed_after(flush):
    """A gpu_bench for bench_ops.graph_bench: the median ms of RUNS replays,
    each after `flush`, timed alone with events."""

    def bench(fn, args):
        for _ in range(10):
            flush()
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(RUNS)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(RUNS)]
        for start, end in zip(starts, ends):
            flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    return bench


moved = b.min_bytes(op, direction, m, n, torch.finfo(dtype).bits // 8)
for provider in providers:
    inputs, dy = b.make_inputs(op, m, n, dtype, "cuda")
    fn = b.provider_fn(provider, op, False)
    times = {}
    for name, flush in FLUSHES.items():
        b.gpu_bench = timed_after(flush)
        times[name], why = b.graph_bench(fn, inputs, dy, direction, None)
        if why:
            print(f"{provider} {name}: {why}")
    print(
        f"{op} {direction} {shape} {dtype_name} {provider:8s} "
        + "  ".join(f"{name} {ms * 1e3:7.2f} us {moved / ms / 1e6:5.0f} GB/s" for name, ms in times.items()),
        flush=True,
    )
