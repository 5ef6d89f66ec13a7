"""The kernels one provider's call launches and each one's device time, with
L2 flushed before every call as bench_ops.py times it (torch.profiler, no
CUDA graph): where a provider's kernel_ms goes.
    python3 bench/kernel_times.py layer_norm fwd 4096x2048 fused liger compile [fp32]
Same inputs, shapes and providers as bench_ops.py (bf16, or a dtype named
among the providers)."""

import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.argv, argv = sys.argv[:1], sys.argv[1:]
import bench_ops as b  # noqa: E402

op, direction, shape, *providers = argv
dtypes = [p for p in providers if p in b.DTYPES]
providers = [p for p in providers if p not in b.DTYPES]
dtype = b.DTYPES[dtypes[-1]] if dtypes else torch.bfloat16
m, n = (int(v) for v in shape.split("x"))
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # as triton's do_bench
calls = 20
for provider in providers:
    inputs, dy = b.make_inputs(op, m, n, dtype, "cuda")
    call = b.make_call(b.provider_fn(provider, op, False), inputs, dy, direction)
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        for _ in range(calls):
            flush.zero_()
            call()
        torch.cuda.synchronize()
    totals = collections.defaultdict(float)
    for event in trace.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.device_time / calls
    for name, us in sorted(totals.items(), key=lambda item: -item[1]):
        if "FillFunctor<signed char>" in name:
            continue  # the flush (int8); a provider's own fills stay listed
        print(f"{op} {direction} {shape} {str(dtype)[6:]} {provider:8s} {us:8.2f} us  {name[:110]}")
