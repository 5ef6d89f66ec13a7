"""Runs one norm op of one provider a few times, for ncu to profile:
    ncu --launch-skip 6 --launch-count 6 python3 bench/profile_norms.py fused layer_norm bwd [16384x4096 [bf16]]
Same inputs, shapes, dtypes and providers as bench_ops.py (it imports them from there)."""

import sys

import torch

sys.argv, argv = sys.argv[:1], sys.argv[1:]
import bench_ops as b  # noqa: E402

provider, op, direction = argv[:3]
m, n = (int(v) for v in (argv[3] if len(argv) > 3 else "16384x4096").split("x"))
dtype = b.DTYPES[argv[4] if len(argv) > 4 else "bf16"]
inputs, dy = b.make_inputs(op, m, n, dtype, "cuda")
call = b.make_call(b.provider_fn(provider, op, False), inputs, dy, direction)
for _ in range(6):
    call()
torch.cuda.synchronize()
