"""Run 93: where the host time of a forward+backward call goes, by shape.
Host time a call (perf_counter over batches of calls, one sync a batch)
for fused and eager LayerNorm bf16 at 8x64, 4096x512, 4096x4096, with
and without do_bench's L2 flush between calls; then cProfile of fused."""
import cProfile
import pstats
import sys
import time

import torch
import torch.nn.functional as F

import fused_ops_py as fo


def host_us(call, n=200, flush=None):
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            if flush is not None:
                flush.zero_()
            call()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
for m, n in ((8, 64), (4096, 512), (4096, 4096)):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    fused = lambda: torch.autograd.grad(fo.fused_layer_norm(x, w, b), (x, w, b), dy)
    eager = lambda: torch.autograd.grad(F.layer_norm(x, (n,), w, b), (x, w, b), dy)
    fused_fwd = lambda: fo.fused_layer_norm(x, w, b)
    eager_fwd = lambda: F.layer_norm(x, (n,), w, b)
    for name, call in (("fused fwdbwd", fused), ("eager fwdbwd", eager), ("fused fwd", fused_fwd), ("eager fwd", eager_fwd)):
        print(f"{m}x{n} {name}: {host_us(call):.1f} us/call, with flush {host_us(call, flush=flush):.1f} us/call", flush=True)
    if m == 4096 and n == 512:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(500):
            fused()
        torch.cuda.synchronize()
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(18)
