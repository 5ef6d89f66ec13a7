"""Run 80: why LayerNorm's forward is slower than RMSNorm's at 65536
columns (bf16 4096 x 65536: 1953 against 2122 GB/s, both in the
shared-memory kernel). LayerNorm also reads a bias: a row of 65536 reads
128 KiB of weight and 128 KiB of bias from L2 beside its 128 KiB of x.
Times fused LayerNorm with weight and bias, weight only, and neither,
against RMSNorm with and without weight, at a few widths (CUDA events
over 50 calls after warm-up; L2 not flushed: the params stay in it, as in
a model)."""
import torch

import fused_ops_py as fo

torch.manual_seed(0)
for rows, cols in ((4096, 65536), (16384, 65536), (4096, 16384), (16384, 16384)):
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    cases = {
        "layer w+b": lambda: fo.fused_layer_norm(x, w, b),
        "layer w": lambda: fo.fused_layer_norm(x, w, None),
        "layer none": lambda: fo.fused_layer_norm(x, None, None),
        "rms w": lambda: fo.fused_rms_norm(x, w),
        "rms none": lambda: fo.fused_rms_norm(x, None),
    }
    for name, call in cases.items():
        for _ in range(5):
            call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            call()
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / 50
        print(f"{rows}x{cols} bf16 {name:11s} {ms * 1000:8.1f} us {2 * x.numel() * 2 / ms / 1e6:7.0f} GB/s (x and y)")
