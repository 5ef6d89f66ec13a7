"""FP8 casts on the GPU: fused_quantize_fp8 against torchao.float8's scaling
math (amax, scale, clamp, convert: torchao's functions restated in torch, so
that any torchao version compares) compiled by torch.compile, rowwise and
tensorwise, with and without the transposed copy, bf16 in.

Kernel time: replays of a CUDA graph of one call, median, L2 flushed
(triton's do_bench). GB/s counts the fewest bytes: x read once, the FP8
copies and the scales written once; the ceiling is a device-to-device
copy of 2 GiB measured in the same run. Each row checks its bytes against
the peer's (they compute the same scales).

    python bench/bench_fp8.py --out bench/results/h200
"""

import argparse
import csv
import json
import types
from pathlib import Path

import torch
from bench_ops import copy_ceiling_gbs, graph_bench

import fused_ops_py as fo

SHAPES = [(1024, 1024), (4096, 4096), (16384, 4096), (8192, 8192)]
FP8 = torch.float8_e4m3fn


def torchao_cast(x, recipe, transpose):
    """torchao.float8's dynamic scaling (tensor_to_scale, amax_to_scale,
    to_fp8_saturated): the peer, compiled."""
    fmax = torch.finfo(FP8).max
    amax = x.abs().amax(dim=-1, keepdim=True) if recipe == "rowwise" else x.abs().amax()
    q = (fmax / amax.double().clamp(min=1e-12)).float()
    if recipe == "rowwise":
        q = torch.exp2(torch.floor(torch.log2(q)))
    y = (x.float() * q).clamp(-fmax, fmax).to(FP8)
    out = (y, q.reciprocal())
    return (*out, y.t().contiguous()) if transpose else out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/local")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timing = types.SimpleNamespace(warmup_ms=25, rep_ms=200, quick=False)  # bench_ops' options
    ceiling = copy_ceiling_gbs(torch.device("cuda"), timing)
    # one specialization a shape, recipe and transpose: past dynamo's default limit of 8
    torch._dynamo.config.recompile_limit = 64
    compiled = torch.compile(torchao_cast, dynamic=False)
    rows = []
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        for recipe, transpose in (("rowwise", False), ("tensorwise", False), ("tensorwise", True)):
            scales = m if recipe == "rowwise" else 1
            nbytes = 2 * m * n + m * n * (2 if transpose else 1) + 4 * scales
            mine = fo.fused_quantize_fp8(x, recipe=recipe, transpose=transpose)
            peer = compiled(x, recipe, transpose)
            same = all(
                torch.equal(*(t.view(torch.uint8) if t.dtype == FP8 else t for t in ab)) for ab in zip(mine, peer)
            )
            for provider, fn in (
                ("fused", lambda x: fo.fused_quantize_fp8(x, recipe=recipe, transpose=transpose)),
                ("torchao-compile", lambda x: compiled(x, recipe, transpose)),
            ):
                ms, _ = graph_bench(fn, (x,), None, "fwd", timing)
                gbs = nbytes / ms / 1e6
                rows.append(
                    dict(
                        shape=f"{m}x{n}",
                        recipe=recipe + ("+transpose" if transpose else ""),
                        provider=provider,
                        us=round(ms * 1e3, 2),
                        gbs=round(gbs),
                        fraction_of_ceiling=round(gbs / ceiling, 3),
                        same_bytes=same,
                    )
                )
                print(rows[-1], flush=True)
    with open(out / "fp8_cast.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_ceiling_gbs=round(ceiling))
    (out / "fp8_cast.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
