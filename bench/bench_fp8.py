"""FP8 casts on the GPU: fused_quantize_fp8 against torchao.float8's scaling
math (amax, scale, clamp, convert: torchao's functions restated in torch, so
that any torchao version compares) compiled by torch.compile, rowwise and
tensorwise, with and without the transposed copy, bf16 in; SwiGLU's FP8
output (fused_swiglu(fp8=...)) against our two calls (fused_swiglu, then
fused_quantize_fp8) and against silu(gate) * up and the cast compiled
together; and RMSNorm's, alone and after the residual add, likewise.

Kernel time: replays of a CUDA graph of one call, median, L2 flushed
(triton's do_bench). GB/s counts the fewest bytes: x read once, the FP8
copies and the scales written once; the ceiling is a device-to-device
copy of 2 GiB measured in the same run. Each row checks its bytes against
the peer's (they compute the same scales).

    python bench/bench_fp8.py --out bench/results/h200
    python bench/bench_fp8.py --no-peers --out DIR  # the fused rows alone (old/new runs)
    python bench/bench_fp8.py --only norm --out DIR  # one of the three tables
"""

import argparse
import csv
import json
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_ops import copy_ceiling_gbs, graph_bench

import fused_ops_py as fo

SHAPES = [(1024, 1024), (4096, 4096), (16384, 4096), (8192, 8192)]
GATE_SHAPES = [(4096, 4096), (8192, 14336)]  # the last: a Llama-3-8B MLP over 4 x 2048 tokens
NORM_SHAPES = [(4096, 4096), (8192, 4096), (16384, 4096)]  # Llama-3-8B's hidden size over 4096-16384 tokens
FORMS = (("rowwise", False), ("tensorwise", False), ("tensorwise", True))
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


def torchao_gate_cast(gate, up, recipe, transpose):
    """silu(gate) * up in bf16, then torchao_cast: compiled as one graph."""
    return torchao_cast(F.silu(gate) * up, recipe, transpose)


def torchao_norm_cast(x, residual, weight, recipe, transpose):
    """RMSNorm (after the residual add, where given) in bf16, then torchao_cast:
    compiled as one graph; with a residual, h beside the cast."""
    h = x if residual is None else x + residual
    cast = torchao_cast(F.rms_norm(h, h.shape[-1:], weight, torch.finfo(h.dtype).eps), recipe, transpose)
    return cast if residual is None else (*cast, h)


def fused_norm(x, residual, weight, **fp8):
    """fused_rms_norm, or fused_add_rms_norm with a residual (its FP8 tuple then h, flat)."""
    if residual is None:
        return fo.fused_rms_norm(x, weight, **fp8)
    y, h = fo.fused_add_rms_norm(x, residual, weight, **fp8)
    return (*y, h) if isinstance(y, tuple) else (y, h)


def two_norm_calls(x, residual, weight, recipe, transpose):
    out = fused_norm(x, residual, weight)
    y, h = out if residual is not None else (out, None)
    cast = fo.fused_quantize_fp8(y, recipe=recipe, transpose=transpose)
    return cast if residual is None else (*cast, h)


def same_bytes(mine, peer):
    return all(torch.equal(*(t.view(torch.uint8) if t.dtype == FP8 else t for t in ab)) for ab in zip(mine, peer))


def row(shape, recipe, transpose, provider, ms, nbytes, ceiling, same):
    gbs = nbytes / ms / 1e6
    return dict(
        shape=shape,
        recipe=recipe + ("+transpose" if transpose else ""),
        provider=provider,
        us=round(ms * 1e3, 2),
        gbs=round(gbs),
        fraction_of_ceiling=round(gbs / ceiling, 3),
        same_bytes=same,
    )


def cast_rows(timing, ceiling, peers):
    compiled = torch.compile(torchao_cast, dynamic=False)
    rows = []
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        for recipe, transpose in FORMS:
            scales = m if recipe == "rowwise" else 1
            nbytes = 2 * m * n + m * n * (2 if transpose else 1) + 4 * scales
            mine = fo.fused_quantize_fp8(x, recipe=recipe, transpose=transpose)
            same = same_bytes(mine, compiled(x, recipe, transpose)) if peers else ""
            providers = [("fused", lambda x: fo.fused_quantize_fp8(x, recipe=recipe, transpose=transpose))]
            if peers:
                providers.append(("torchao-compile", lambda x: compiled(x, recipe, transpose)))
            for provider, fn in providers:
                ms, _ = graph_bench(fn, (x,), None, "fwd", timing)
                rows.append(row(f"{m}x{n}", recipe, transpose, provider, ms, nbytes, ceiling, same))
                print(rows[-1], flush=True)
    return rows


def gate_rows(timing, ceiling, peers):
    compiled = torch.compile(torchao_gate_cast, dynamic=False)
    rows = []
    for m, n in GATE_SHAPES:
        gate = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        up = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        for recipe, transpose in FORMS:
            scales = m if recipe == "rowwise" else 1
            nbytes = 4 * m * n + m * n * (2 if transpose else 1) + 4 * scales  # gate and up in, FP8 out
            mine = fo.fused_swiglu(gate, up, fp8=recipe, transpose=transpose)
            two_calls = fo.fused_quantize_fp8(fo.fused_swiglu(gate, up), recipe=recipe, transpose=transpose)
            same = same_bytes(mine, two_calls)
            providers = [
                ("fused", lambda g, u: fo.fused_swiglu(g, u, fp8=recipe, transpose=transpose)),
                (
                    "fused-two-calls",
                    lambda g, u: fo.fused_quantize_fp8(fo.fused_swiglu(g, u), recipe=recipe, transpose=transpose),
                ),
            ]
            if peers:
                providers.append(("torchao-compile", lambda g, u: compiled(g, u, recipe, transpose)))
            for provider, fn in providers:
                ms, _ = graph_bench(fn, (gate, up), None, "fwd", timing)
                rows.append(row(f"{m}x{n}", recipe, transpose, provider, ms, nbytes, ceiling, same))
                print(rows[-1], flush=True)
    return rows


def norm_rows(timing, ceiling, peers):
    compiled = torch.compile(torchao_norm_cast, dynamic=False)
    rows = []
    for m, n in NORM_SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        weight = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for residual in (None, torch.randn(m, n, device="cuda", dtype=torch.bfloat16)):
            name = "rms_norm" if residual is None else "add_rms_norm"
            for recipe, transpose in FORMS:
                scales = m if recipe == "rowwise" else 1
                # x (and the residual) in, (h and) the FP8 copies and scales out
                nbytes = (2 if residual is None else 6) * m * n + m * n * (2 if transpose else 1) + 4 * scales
                mine = fused_norm(x, residual, weight, fp8=recipe, transpose=transpose)
                same = same_bytes(mine, two_norm_calls(x, residual, weight, recipe, transpose))
                providers = [
                    ("fused", lambda x, r, w: fused_norm(x, r, w, fp8=recipe, transpose=transpose)),
                    ("fused-two-calls", lambda x, r, w: two_norm_calls(x, r, w, recipe, transpose)),
                ]
                if peers:
                    providers.append(("torchao-compile", lambda x, r, w: compiled(x, r, w, recipe, transpose)))
                for provider, fn in providers:
                    ms, _ = graph_bench(fn, (x, residual, weight), None, "fwd", timing)
                    rows.append(row(f"{name} {m}x{n}", recipe, transpose, provider, ms, nbytes, ceiling, same))
                    print(rows[-1], flush=True)
    return rows


def write(out, name, rows, meta):
    with open(out / f"{name}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / f"{name}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/local")
    parser.add_argument("--no-peers", action="store_true", help="the fused rows alone")
    parser.add_argument("--only", choices=("cast", "gate", "norm"), help="one table of the three")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timing = types.SimpleNamespace(warmup_ms=25, rep_ms=200, quick=False)  # bench_ops' options
    ceiling = copy_ceiling_gbs(torch.device("cuda"), timing)
    # one specialization a shape, recipe and transpose: past dynamo's default limit of 8
    torch._dynamo.config.recompile_limit = 64
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_ceiling_gbs=round(ceiling))
    for name, rows in (("cast", cast_rows), ("gate", gate_rows), ("norm", norm_rows)):
        if args.only in (None, name):
            write(out, f"fp8_{name}", rows(timing, ceiling, not args.no_peers), meta)


if __name__ == "__main__":
    main()
