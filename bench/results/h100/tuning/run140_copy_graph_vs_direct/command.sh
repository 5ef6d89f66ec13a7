#!/bin/bash
# Run 140: the copy timed as copy_by_size.py times it (a direct launch) and
# as bench_ops.py times kernel_ms (replays of a CUDA graph of the call), at
# the sizes where the forward target meets the copy: is copy_by_size.csv a
# fair limit for the grid's kernel times?
python3 - <<'PY' | tee $OUT/copy_graph_vs_direct.txt
import torch
from triton.testing import do_bench
print("MiB moved | direct us | graph us | direct GB/s | graph GB/s")
for mib in (16, 32, 64, 128, 256, 512, 1024):
    src = torch.empty(mib * 2**19, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dst.copy_(src)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dst.copy_(src)
    d = do_bench(lambda: dst.copy_(src), warmup=25, rep=100, return_mode="median")
    r = do_bench(g.replay, warmup=25, rep=100, return_mode="median")
    print(f"{mib} | {d*1e3:.2f} | {r*1e3:.2f} | {mib*2**20/d/1e6:.0f} | {mib*2**20/r/1e6:.0f}")
PY
