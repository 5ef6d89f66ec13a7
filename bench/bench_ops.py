#!/usr/bin/env python3
"""Benchmark fused_ops_py against eager PyTorch, torch.compile and (for the
norms, SwiGLU, GeGLU and RoPE, when importable) Liger-Kernel.

For every op x direction x shape x dtype x provider it checks the provider's
outputs against eager, then times it and writes one row to CSV and JSON plus a
markdown summary (bf16) under --out (default bench/results/<device-slug>/).

On CUDA two times are taken, both with triton.testing.do_bench (median, L2
flushed before every run):
  call_ms   the Python call as a user makes it (autograd bookkeeping included),
  kernel_ms replays of a CUDA graph captured from that call: the GPU work
            alone, plus one graph launch (a few us: it dominates tiny shapes).
GB/s uses kernel_ms (call_ms where no graph could be captured) and is set
against a device-to-device copy measured in the same run (the copy ceiling).
On CPU (--quick, --device cpu) only call_ms exists: perf_counter medians.
fwd is the training forward (inputs require grad: fused saves its mask), bwd
the backward alone, fwdbwd both. Exits 1 if any provider's check is BAD.
--isolate times each provider in a process of its own, joined as combine.py
joins parts: one provider's state can move another's times (after
torch.compile had run in the process, Liger's LayerNorm forward read
15.5 us at 4096x2048 bf16, alone 18.3 us). With --provider-runs DIR each
provider's run stays in DIR/<provider>, so the runs finished before a time
limit can still be joined (combine.py OUT DIR/*).

    python bench/bench_ops.py                         # the full GPU set
    python bench/bench_ops.py --quick --out /tmp/b    # CPU smoke run
    python bench/bench_ops.py --ops relu,square --dtypes bf16 --shapes 16384x4096
"""

import argparse
import csv
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch._functorch.config

import fused_ops_py as fo

OPS = {  # the directions each op is timed in
    "bias_scale_relu": ("fwd", "bwd", "fwdbwd"),
    "relu": ("fwd", "bwd"),
    "square": ("fwd", "bwd"),
    "reduce_sum": ("fwd",),
    "layer_norm": ("fwd", "bwd", "fwdbwd"),
    "rms_norm": ("fwd", "bwd", "fwdbwd"),
    "add_rms_norm": ("fwd", "bwd", "fwdbwd"),
    "swiglu": ("fwd", "bwd", "fwdbwd"),
    "geglu": ("fwd", "bwd", "fwdbwd"),
    "rope": ("fwd", "bwd", "fwdbwd"),
    "rope_interleaved": ("fwd", "bwd", "fwdbwd"),
    "dyt": ("fwd", "bwd", "fwdbwd"),
}
ROPES = ("rope", "rope_interleaved")
NORMS = ("layer_norm", "rms_norm", "add_rms_norm")
EPS = 1e-5
try:  # Liger-Kernel: Triton norms, a peer where it has the op
    from liger_kernel.ops.geglu import LigerGELUMulFunction  # tanh GELU only
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.ops.rope import LigerRopeFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
except ImportError:
    LigerLayerNormFunction = LigerRMSNormFunction = LigerSiLUMulFunction = None
    LigerGELUMulFunction = LigerRopeFunction = None
try:
    from liger_kernel.ops.dyt import LigerDyTFunction
except ImportError:  # Liger before its DyT
    LigerDyTFunction = None
PROVIDERS = ("fused", "eager", "compile") + (("liger",) if LigerLayerNormFunction else ())
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# The LLM shapes: rows M x hidden N, where one tensor of the dtype stays
# within MAX_TENSOR_BYTES (run_shapes drops the rest), and a tiny row whose
# time is host overhead.
GRID_ROWS = (4096, 16384, 65536)
GRID_COLS = (512, 1024, 2048, 4096, 8192, 16384, 65536)
GPU_SHAPES = [(m, n) for m in GRID_ROWS for n in GRID_COLS] + [(8, 64)]
MAX_TENSOR_BYTES = 4e9
QUICK_SHAPES = [(8, 64), (512, 1024)]
# A power of two: x * SCALE is exact in every dtype, so eager's two roundings
# (x*scale, then +bias) equal the fused kernel's one and the check can be
# tight. The value does not change the bytes moved.
SCALE = 0.5
# rope's rows x cols is q as [T, H * D] of one sequence (B = 1): T = rows
# tokens of H = cols / 128 heads of D = 128, and k a quarter of the heads
# (GQA, as Llama 3); see rope_heads.
ROPE_HEAD_DIM = 128
ROPE_KV_GROUP = 4


def rope_heads(cols):
    """(q heads, head_dim) of a rope row of cols = heads * head_dim: heads of
    ROPE_HEAD_DIM, a multiple of ROPE_KV_GROUP of them; a narrower row (the
    tiny 8x64) ROPE_KV_GROUP heads of cols / ROPE_KV_GROUP; None where
    neither fits (run_shapes drops the shape for rope)."""
    if cols % (ROPE_HEAD_DIM * ROPE_KV_GROUP) == 0:
        return cols // ROPE_HEAD_DIM, ROPE_HEAD_DIM
    if cols < ROPE_HEAD_DIM * ROPE_KV_GROUP and cols % (2 * ROPE_KV_GROUP) == 0:
        return ROPE_KV_GROUP, cols // ROPE_KV_GROUP
    return None


# --- the ops, per provider ------------------------------------------------
# Each takes (x, bias) or (x,); separate named functions so that dynamo keeps
# a separate compile cache per op.


def eager_bias_scale_relu(x, b):
    return torch.relu(x * SCALE + b)


def eager_relu(x):
    return torch.relu(x)


def eager_square(x):
    return torch.square(x)


def eager_reduce_sum(x):
    return x.sum()


def eager_layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, EPS)


def eager_rms_norm(x, w):
    return torch.nn.functional.rms_norm(x, x.shape[-1:], w, EPS)


def eager_add_rms_norm(x, r, w):
    # the pre-norm block: the residual sum, then its norm (y is timed; the
    # residual stream's own continuation is the same for every provider)
    return torch.nn.functional.rms_norm(x + r, x.shape[-1:], w, EPS)


def eager_swiglu(gate, up):
    return torch.nn.functional.silu(gate) * up


def eager_geglu(gate, up):
    return torch.nn.functional.gelu(gate, approximate="tanh") * up


def eager_dyt(x, alpha, w, b):
    return w * torch.tanh(alpha * x) + b


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def eager_rope(q, k, cos, sin):
    # Hugging Face's apply_rotary_pos_emb (unsqueeze_dim=1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rotate_interleaved(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def eager_rope_interleaved(q, k, cos, sin):
    # Cohere's apply_rotary_pos_emb in q's dtype (unsqueeze_dim=1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_interleaved(q) * sin, k * cos + rotate_interleaved(k) * sin


EAGER = {
    "swiglu": eager_swiglu,
    "geglu": eager_geglu,
    "rope": eager_rope,
    "rope_interleaved": eager_rope_interleaved,
    "bias_scale_relu": eager_bias_scale_relu,
    "relu": eager_relu,
    "square": eager_square,
    "reduce_sum": eager_reduce_sum,
    "layer_norm": eager_layer_norm,
    "rms_norm": eager_rms_norm,
    "add_rms_norm": eager_add_rms_norm,
    "dyt": eager_dyt,
}
FUSED = {
    "swiglu": fo.fused_swiglu,
    "geglu": lambda gate, up: fo.fused_geglu(gate, up, approximate="tanh"),
    "rope": fo.fused_rope,
    "rope_interleaved": lambda q, k, cos, sin: fo.fused_rope(q, k, cos, sin, interleaved=True),
    "bias_scale_relu": lambda x, b: fo.fused_bias_scale_relu(x, b, SCALE),
    "relu": fo.relu,
    "square": fo.square,
    "reduce_sum": fo.reduce_sum,
    "layer_norm": lambda x, w, b: fo.fused_layer_norm(x, w, b, EPS),
    "rms_norm": lambda x, w: fo.fused_rms_norm(x, w, EPS),
    "add_rms_norm": lambda x, r, w: fo.fused_add_rms_norm(x, r, w, EPS)[0],
    "dyt": fo.fused_dyt,
}
LIGER = {}
if LigerLayerNormFunction:
    LIGER = {
        "layer_norm": lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, EPS),
        # offset 0, llama casting (fp32 compute), not in place
        "rms_norm": lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False),
        "swiglu": LigerSiLUMulFunction.apply,
        "geglu": LigerGELUMulFunction.apply,
        # q and k [B, H, T, D], cos and sin [B, T, D]; rotates q, k (and
        # in backward dq, dk) in place, as its SwiGLU and GeGLU backward
        # write over gate and up: check_providers checks Liger last
        "rope": LigerRopeFunction.apply,
    }
    if LigerDyTFunction:
        LIGER["dyt"] = LigerDyTFunction.apply
_compiled = {}


def provider_fn(provider, op, dynamic):
    if provider == "fused":
        return FUSED[op]
    if provider == "eager":
        return EAGER[op]
    if provider == "liger":
        if op not in LIGER:
            raise NotImplementedError(f"Liger-Kernel has no {op}")
        return LIGER[op]
    if op not in _compiled:
        # Default mode. dynamic=False by default: every shape gets kernels
        # specialised to it, the strongest compile baseline (with dynamo's
        # automatic dynamic shapes the first shape would be static and the
        # rest symbolic). That is one compile per shape and dtype, so the
        # recompile limit (8) must be raised.
        _compiled[op] = torch.compile(EAGER[op], dynamic=None if dynamic else False)
    return _compiled[op]


# --- bytes: the fewest an op must move, one formula for all providers ------


def min_bytes(op, direction, rows, cols, itemsize):
    """fwd reads x (+ bias) and writes y; bwd reads dy and an x-sized saved
    input and writes dx (+ dbias), as the peers' numbers count it. The fused
    forward also writes a 1-bit mask (rows*cols/8 bytes) and its backward
    reads that mask instead of an x-sized tensor, so its GB/s is an effective
    rate over the same bytes as the peers: a plain time ratio between
    providers, which may pass the copy ceiling for fused bwd."""
    e = rows * cols * itemsize
    if op in ("swiglu", "geglu"):  # fwd: gate, up in, y out; bwd: dy, gate, up in, two grads out
        return {"fwd": 3 * e, "bwd": 5 * e, "fwdbwd": 8 * e}[direction]
    if op in ROPES:
        # fwd: q, k (a quarter of q's size) in, q_embed, k_embed out; bwd:
        # dq_embed, dk_embed in, dq, dk out; each reads cos and sin [1, T, D]
        tables = 2 * rows * rope_heads(cols)[1] * itemsize
        one = 2 * (e + e // ROPE_KV_GROUP) + tables
        return {"fwd": one, "bwd": one, "fwdbwd": 2 * one}[direction]
    if op in NORMS:
        # fwd: x (+ residual) in, y (+ residual_out) out, params, and the
        # per-row fp32 statistics backward needs; bwd: dy and x in, dx out
        # (LayerNorm/RMSNorm, as the issue counts it); the add variant also
        # reads the saved sum and writes one gradient for x and residual.
        params = cols * itemsize * (2 if op == "layer_norm" else 1)
        stats = rows * 4 * (2 if op == "layer_norm" else 1)
        streams = 2 if op == "add_rms_norm" else 1
        fwd = 2 * streams * e + params + stats
        bwd = 3 * e + params + stats
        return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[direction]
    if op == "dyt":  # x in, y out, weight and bias; bwd: dy and x in, dx and the three gradients out
        params = 2 * cols * itemsize
        return {"fwd": 2 * e + params, "bwd": 3 * e + 2 * params, "fwdbwd": 5 * e + 3 * params}[direction]
    bias = cols * itemsize if op == "bias_scale_relu" else 0
    fwd = e + itemsize if op == "reduce_sum" else 2 * e + bias
    bwd = 3 * e + bias
    return {"fwd": fwd, "bwd": bwd, "fwdbwd": fwd + bwd}[direction]


# --- timing ----------------------------------------------------------------


def wrt(inputs):
    """The inputs that get gradients (all but rope's cos and sin)."""
    return [t for t in inputs if t.requires_grad]


def make_call(fn, inputs, dy, direction):
    """A zero-argument callable doing one `direction` of fn on inputs. fn
    returns a tensor, or a tuple of them (rope) with dy a tuple to match."""
    if direction == "fwd":  # the training forward: grad on, fused saves its mask
        return lambda: fn(*inputs)
    targets = wrt(inputs)
    if direction == "fwdbwd":
        return lambda: torch.autograd.grad(fn(*inputs), targets, dy)
    # bwd: one forward now and its graph kept (retain_graph) so that only the
    # backward is timed, for compile too (its compiled backward runs from
    # AOTAutograd's node). Timing fwdbwd - fwd instead would subtract two
    # noisy medians and charge the difference in allocator state to bwd.
    y = fn(*inputs)
    return lambda: torch.autograd.grad(y, targets, dy, retain_graph=True)


def gpu_bench(fn, args):
    from triton.testing import do_bench  # median of runs, L2 flushed before each

    return do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")


def cpu_bench(fn, args):
    fn()
    times = []
    deadline = time.perf_counter() + args.rep_ms / 1e3
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 10000):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def graph_bench(fn, inputs, dy, direction, args):
    """(ms, why) for replays of a CUDA graph of one call; (nan, reason) if
    capture fails. Everything, the bwd direction's forward too, runs on the
    capture stream: autograd runs backward ops on their forward's stream, and
    that stream must be the one being captured."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):  # warm up off the default stream, as torch docs ask
            call = make_call(fn, inputs, dy, direction)
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            call()
        return gpu_bench(graph.replay, args), ""
    except Exception as error:  # record it, keep going
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return math.nan, f"graph capture failed: {type(error).__name__}: {error}"[:300]


def peak_extra_mib(call):
    """Memory one call allocates beyond what is live before it, in MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def copy_ceiling_gbs(device, args):
    """GB/s of dst.copy_(src), counting bytes read and written."""
    nbytes = (1 << 30) if device.type == "cuda" and not args.quick else (64 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    bench = gpu_bench if device.type == "cuda" else cpu_bench
    ms = bench(lambda: dst.copy_(src), args)
    return 2 * nbytes / ms / 1e6


# --- correctness ------------------------------------------------------------

RTOL = {torch.bfloat16: 2**-7, torch.float16: 2**-10, torch.float32: 1e-5}
ATOL = 1e-6


def outputs(fn, op, inputs, dy):
    """(y, grads...) of one forward and backward ((q_embed, k_embed, dq, dk)
    for rope)."""
    y = fn(*inputs)
    if op == "reduce_sum":  # its backward is an expand: not timed, not checked
        return (y.detach(),)
    ys = y if isinstance(y, tuple) else (y,)
    return (*(t.detach() for t in ys), *torch.autograd.grad(y, wrt(inputs), dy))


def tolerance_scales(ref, op, inputs, dy):
    """The magnitude each output's error is measured against, one tensor an
    output, from eager's outputs and the inputs before any provider ran
    (Liger writes over some of its inputs)."""
    # (rough magnitudes: rope's and geglu's terms in the dtype, as float32
    # would double the memory of the largest shapes)
    if op in ROPES:
        # each element is x * cos + (+-x') * sin, two products that may
        # cancel: within a rounding of the sum of their magnitudes (the
        # backward's likewise, of dy, since cos and sin repeat by halves)
        cos, sin = (t.abs().unsqueeze(1) for t in inputs[2:])
        xs = [t.detach() for t in (*inputs[:2], *dy)]
        rotate = rotate_half if op == "rope" else rotate_interleaved
        return [(x.abs() * cos + rotate(x).abs() * sin).float() for x in xs]
    if op == "geglu":
        # gelu(g) = 0.5 g (1 + tanh z) and its derivative are sums whose
        # terms cancel for negative g, where eager (float32 inside) loses
        # digits that fused keeps: within a rounding of the dtype of the
        # result plus a few (4) roundings of float32 of the terms' magnitudes
        g, u = (t.detach() for t in inputs)
        k = math.sqrt(2 / math.pi)
        t = torch.tanh(k * (g + 0.044715 * g**3))
        dgelu = 0.5 * (1 + t.abs()) + 0.5 * k * g.abs() * (1 + t * t) * (1 + 3 * 0.044715 * g * g)
        f32 = 4 * torch.finfo(torch.float32).eps / RTOL[g.dtype]
        return [
            ref[0].abs().float() + f32 * (g * u).abs().float(),
            ref[1].abs().float() + f32 * (dy * u * dgelu).abs().float(),
            ref[2].abs().float() + f32 * (dy * g).abs().float(),
        ]
    scales = [ref[0].abs().float()]
    if op == "reduce_sum":
        scales = [inputs[0].detach().abs().float().sum()]
    elif op in NORMS:  # dx like y; the parameter gradients are column sums
        rms = dy.abs().float().sum(0) * 8  # |xhat| stays under ~8 for randn rows
        scales += [ref[1].abs().float().max() * torch.ones_like(ref[1], dtype=torch.float32)]
        scales += [
            ref[i].abs().float().max() * torch.ones_like(ref[i], dtype=torch.float32)
            if ref[i].shape == ref[1].shape
            else rms
            for i in range(2, len(ref))
        ]
    elif op == "dyt":
        # y = w t + b and dx = dy w alpha (1 - t^2) are sums and products
        # that eager rounds term by term (t, w t and y; dy w, its product
        # with 1 - t^2 and with alpha): within two roundings of the terms'
        # magnitudes for y, three for dx; dalpha is a sum over all elements,
        # dweight and dbias over rows
        x, alpha, w, b = (t.detach().float() for t in inputs)
        t = torch.tanh(alpha * x)
        column = dy.abs().float().sum(0)
        dyw = (dy.float() * w).abs()
        scales = [2 * ((w * t).abs() + b.abs()), 3 * dyw * alpha.abs(), (dyw * x * (1 - t * t)).abs().sum().reshape(1)]
        scales += [column, column]
    elif len(ref) > 1:
        scales.append(ref[1].abs().float())
        if op == "bias_scale_relu":
            scales.append(dy.abs().float().sum(0))
        if op == "swiglu":  # dup, elementwise like dgate
            scales.append(ref[2].abs().float())
    return scales


def check(got, ref, scales, dtype):
    """(ok, max abs diff, max rel diff) against eager. Elementwise outputs
    must agree within a rounding of the dtype; sums (reduce_sum, dbias)
    within a rounding of the sum of the magnitudes summed, since the order
    of a reduction is free."""
    ok, max_abs, max_rel = True, 0.0, 0.0
    for g, r, s in zip(got, ref, scales):
        diff = (g.float() - r.float()).abs()
        ok &= g.shape == r.shape and bool((diff <= ATOL + RTOL[dtype] * s).all())
        max_abs = max(max_abs, diff.max().item())
        max_rel = max(max_rel, (diff / (r.float().abs() + ATOL)).max().item())
    return ok, max_abs, max_rel


# --- the run ----------------------------------------------------------------

FIELDS = [
    "op",
    "direction",
    "rows",
    "cols",
    "dtype",
    "provider",
    "kernel_ms",
    "call_ms",
    "gbs",
    "fraction_of_ceiling",
    "speedup_vs_fused",
    "speedup_vs_eager",
    "speedup_vs_compile",
    "speedup_vs_liger",
    "call_speedup_vs_fused",
    "call_speedup_vs_eager",
    "call_speedup_vs_compile",
    "call_speedup_vs_liger",
    "peak_extra_mib",
    "bytes",
    "check",
    "max_abs_diff",
    "max_rel_diff",
    "note",
    "device",
    "torch",
    "fused_ops_py",
]


def make_inputs(op, m, n, dtype, device):
    gen = torch.Generator(device=device).manual_seed(0)
    if op in ROPES:  # q [1, H, T, D] and k [1, H/4, T, D], views of [1, T, H, D] as HF's
        heads, d = rope_heads(n)
        view = lambda h: torch.randn(1, m, h, d, dtype=dtype, device=device, generator=gen).transpose(1, 2)
        q, k = (view(h).requires_grad_() for h in (heads, heads // ROPE_KV_GROUP))
        dy = (view(heads), view(heads // ROPE_KV_GROUP))
        # Hugging Face's tables: emb = cat(freqs, freqs) in fp32, cast to the dtype
        inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
        freqs = torch.arange(m, dtype=torch.float32, device=device)[:, None] * inv_freq
        emb = (torch.cat((freqs, freqs), dim=-1) if op == "rope" else freqs.repeat_interleave(2, dim=-1))[None]
        return (q, k, emb.cos().to(dtype), emb.sin().to(dtype)), dy
    x = torch.randn(m, n, dtype=dtype, device=device, generator=gen).requires_grad_()
    b = torch.randn(n, dtype=dtype, device=device, generator=gen).requires_grad_()
    dy = torch.randn(m, n, dtype=dtype, device=device, generator=gen)
    if op in ("swiglu", "geglu"):
        up = torch.randn(m, n, dtype=dtype, device=device, generator=gen).requires_grad_()
        return (x, up), dy
    if op == "dyt":  # alpha [1] as LigerDyT's; weight near 1
        alpha = torch.full((1,), 0.5, dtype=dtype, device=device).requires_grad_()
        w = (1 + 0.1 * torch.randn(n, dtype=dtype, device=device, generator=gen)).requires_grad_()
        return (x, alpha, w, b), dy
    if op in NORMS:
        w = (1 + 0.1 * torch.randn(n, dtype=dtype, device=device, generator=gen)).requires_grad_()
        if op == "layer_norm":
            return (x, w, b), dy
        if op == "add_rms_norm":
            r = torch.randn(m, n, dtype=dtype, device=device, generator=gen).requires_grad_()
            return (x, r, w), dy
        return (x, w), dy
    return ((x, b) if op == "bias_scale_relu" else (x,)), dy


def providers_for(op, args):
    """The providers that have op (Liger has only some)."""
    return [p for p in args.providers if p != "liger" or op in LIGER]


def check_providers(op, inputs, dy, dtype, args):
    """{provider: (ok, max abs, max rel, error or "")}. compile compiles
    here, outside any timing. Liger goes last: it writes over some inputs."""
    ref = outputs(EAGER[op], op, inputs, dy)
    scales = tolerance_scales(ref, op, inputs, dy)
    checks = {}
    for p in sorted(providers_for(op, args), key=lambda p: p == "liger"):
        try:
            got = outputs(provider_fn(p, op, args.compile_dynamic), op, inputs, dy)
            checks[p] = (*check(got, ref, scales, dtype), "")
        except Exception as error:
            checks[p] = (False, math.nan, math.nan, f"{type(error).__name__}: {error}"[:300])
    return checks


def bench_row(row, fn, inputs, dy, device, args):
    """Fill row's times; an error is noted in the row, never raised."""
    direction = row["direction"]
    try:
        if device.type != "cuda":
            row["call_ms"] = cpu_bench(make_call(fn, inputs, dy, direction), args)
            return
        row["call_ms"] = gpu_bench(make_call(fn, inputs, dy, direction), args)
        row["kernel_ms"], row["note"] = graph_bench(fn, inputs, dy, direction, args)
        if direction == "fwdbwd":  # fused saves a bit mask where eager saves a tensor
            row["peak_extra_mib"] = peak_extra_mib(make_call(fn, inputs, dy, direction))
    except Exception as error:
        row["note"] = f"{type(error).__name__}: {error}"[:300]


def bench_case(op, m, n, dname, device, args, meta, progress):
    """The rows of one op, shape and dtype: each direction x provider."""
    inputs, dy = make_inputs(op, m, n, DTYPES[dname], device)
    checks = check_providers(op, inputs, dy, DTYPES[dname], args)
    rows = []
    for direction in [d for d in OPS[op] if d in args.directions]:
        nbytes = min_bytes(op, direction, m, n, inputs[0].element_size())
        group = []
        for p in providers_for(op, args):
            ok, max_abs, max_rel, error = checks[p]
            row = dict.fromkeys(FIELDS, math.nan)
            row.update(
                op=op,
                direction=direction,
                rows=m,
                cols=n,
                dtype=dname,
                provider=p,
                bytes=nbytes,
                check="ok" if ok else "BAD",
                max_abs_diff=max_abs,
                max_rel_diff=max_rel,
                note=error,
                device=meta["device"],
                torch=meta["torch"],
                fused_ops_py=meta["fused_ops_py"],
            )
            if not error:  # a provider that could not run is not timed
                bench_row(row, provider_fn(p, op, args.compile_dynamic), inputs, dy, device, args)
            t = row["call_ms"] if math.isnan(row["kernel_ms"]) else row["kernel_ms"]
            row["gbs"] = nbytes / t / 1e6
            row["fraction_of_ceiling"] = row["gbs"] / meta["copy_ceiling_gbs"]
            group.append(row)
            print(
                f"[{next(progress)}] {op:15s} {direction:6s} {m}x{n} {dname} {p:7s} "
                f"kernel {row['kernel_ms']:.4f} ms  call {row['call_ms']:.4f} ms  "
                f"{row['gbs']:8.1f} GB/s  {row['check']}" + (f"  ({row['note']})" if row["note"] else ""),
                flush=True,
            )
        add_speedups(group)
        rows += group
    return rows


def run_shapes(args, dname, op):
    """args.shapes without those whose tensors pass MAX_TENSOR_BYTES in dname
    (and for rope those rope_heads cannot split into heads)."""
    itemsize = DTYPES[dname].itemsize
    return [
        (m, n) for m, n in args.shapes if m * n * itemsize <= MAX_TENSOR_BYTES and (op not in ROPES or rope_heads(n))
    ]


def run(args, device, meta):
    total = sum(
        len(run_shapes(args, dname, op))
        * len(providers_for(op, args))
        * len([d for d in OPS[op] if d in args.directions])
        for op in args.ops
        for dname in args.dtypes
    )
    progress = (f"{i}/{total}" for i in range(1, total + 1))
    rows = []
    for op in args.ops:
        for dname in args.dtypes:
            for m, n in run_shapes(args, dname, op):
                rows += bench_case(op, m, n, dname, device, args, meta, progress)
                if device.type == "cuda":
                    torch.cuda.empty_cache()  # the next case starts from a clean pool
    return rows


def add_speedups(group):
    """speedup_vs_<peer> = peer time / this time: kernel time (call time where
    either lacks one); call_speedup_vs_<peer> on call times alone."""
    for row in group:
        for peer in (peer for peer in group if peer is not row):
            both_kernel = not (math.isnan(row["kernel_ms"]) or math.isnan(peer["kernel_ms"]))
            key = "kernel_ms" if both_kernel else "call_ms"
            row[f"speedup_vs_{peer['provider']}"] = peer[key] / row[key]
            row[f"call_speedup_vs_{peer['provider']}"] = peer["call_ms"] / row["call_ms"]


# --- output -----------------------------------------------------------------


def summary_markdown(rows, meta):
    """One table per dtype (bf16, fp16, fp32 as present), one row per op,
    direction and shape."""
    dtypes = [d for d in DTYPES if any(r["dtype"] == d for r in rows)]
    fmt = lambda v, spec: "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)
    lines = [
        f"# fused_ops_py benchmark, {', '.join(dtypes)}",
        "",
        f"{meta['device']}{'' if meta['cuda'] else ' (torch and fused_ops_py on %d threads)' % meta['cpu_threads']}; "
        f"torch {meta['torch']}; fused_ops_py {meta['fused_ops_py']}; "
        f"copy ceiling {meta['copy_ceiling_gbs']:.0f} GB/s (read + write). GB/s from "
        f"{'CUDA-graph kernel time' if meta['cuda'] else 'call time'}, over the fewest "
        "bytes an op must move (fused's 1-bit mask not counted: fused bwd is an effective "
        "rate). fwd is the training forward. x vs = speedup of fused over the peer "
        "(kernel time); call x best = the fastest peer's call time over fused's (the "
        "Python call with autograd, as a user sees it). Peak = MiB one fwdbwd call "
        "allocates.",
    ]
    for dname in dtypes:
        by = {(r["op"], r["direction"], r["rows"], r["cols"], r["provider"]): r for r in rows if r["dtype"] == dname}
        keys = sorted({k[:4] for k in by}, key=lambda k: (list(OPS).index(k[0]), OPS[k[0]].index(k[1]), k[3], k[2]))
        lines += [
            "",
            f"## {dname}",
            "",
            "| op | dir | rows x cols | fused GB/s | eager GB/s | compile GB/s | liger GB/s "
            "| x vs eager | x vs compile | x vs liger | call x best | fused % of copy "
            "| peak MiB fused / eager | check |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for op, d, m, n in keys:
            f, e, c, li = (by.get((op, d, m, n, p)) for p in ("fused", "eager", "compile", "liger"))
            gbs = lambda r: fmt(r and r["gbs"], ".0f" if r and r["gbs"] >= 100 else ".3g")
            peak = (
                f"{fmt(f['peak_extra_mib'], '.0f')} / {fmt(e['peak_extra_mib'], '.0f')}"
                if d == "fwdbwd" and f and e and meta["cuda"]
                else ""
            )
            li = li if li and not li["note"].startswith("NotImplementedError") else None
            bad = [r["provider"] for r in (f, e, c, li) if r and r["check"] != "ok"]
            peers = [r["call_ms"] for r in (e, c, li) if r and not math.isnan(r["call_ms"])]
            call_best = min(peers) / f["call_ms"] if f and peers else None
            lines.append(
                f"| {op} | {d} | {m}x{n} | {gbs(f)} | {gbs(e)} | {gbs(c)} | {gbs(li)} "
                f"| {fmt(f and e and f.get('speedup_vs_eager'), '.2f')} "
                f"| {fmt(f and c and f.get('speedup_vs_compile'), '.2f')} "
                f"| {fmt(f and li and f.get('speedup_vs_liger'), '.2f')} "
                f"| {fmt(call_best, '.2f')} "
                f"| {fmt(f and 100 * f['fraction_of_ceiling'], '.0f')} | {peak} "
                f"| {'BAD: ' + ','.join(bad) if bad else 'ok'} |"
            )
    return "\n".join(lines) + "\n"


def write_outputs(rows, meta, out):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    clean = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v
    with open(out / "results.json", "w") as f:
        json.dump({"meta": meta, "rows": [{k: clean(v) for k, v in r.items()} for r in rows]}, f, indent=1)
    summary = summary_markdown(rows, meta)
    (out / "summary.md").write_text(summary)
    return summary


def device_name(device):
    return (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"cpu {platform.processor() or platform.machine()}"
    )


def results_dir(name):
    """bench/results/<device slug>/: one folder a device, for every bench tool."""
    return Path(__file__).resolve().parent / "results" / re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def comma_list(allowed):
    def parse(text):
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values or not set(values) <= set(allowed):
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)}")
        return values

    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=comma_list(OPS), default=list(OPS), help="comma list")
    p.add_argument("--directions", type=comma_list(("fwd", "bwd", "fwdbwd")), default=["fwd", "bwd", "fwdbwd"])
    p.add_argument("--dtypes", type=comma_list(DTYPES), help="default all; fp32 with --quick")
    p.add_argument("--shapes", help="comma list of ROWSxCOLS, e.g. 4096x4096,8x64")
    p.add_argument("--providers", type=comma_list(PROVIDERS), default=list(PROVIDERS))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="smoke run: small shapes, fp32, short timing")
    p.add_argument("--warmup-ms", type=int, default=25)
    p.add_argument("--rep-ms", type=int, default=100)
    p.add_argument(
        "--compile-dynamic",
        action="store_true",
        help="torch.compile(dynamic=None: automatic dynamic shapes), not dynamic=False",
    )
    p.add_argument("--out", type=Path, help="default bench/results/<device-slug>/")
    p.add_argument("--isolate", action="store_true", help="each provider in a process of its own, the results joined")
    p.add_argument(
        "--provider-runs",
        type=Path,
        help="with --isolate: keep each provider's run in DIR/<provider> (default: a temporary folder)",
    )
    args = p.parse_args(argv)
    args.dtypes = args.dtypes or (["fp32"] if args.quick else list(DTYPES))
    if args.shapes:
        args.shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
    else:  # the GPU shapes would take minutes a row on a CPU
        args.shapes = QUICK_SHAPES if args.quick or args.device == "cpu" else GPU_SHAPES
    if args.quick:
        args.warmup_ms, args.rep_ms = min(args.warmup_ms, 5), min(args.rep_ms, 20)
    return args


def run_isolated(args, argv):
    """Runs this script once a provider (argv without --isolate, --providers,
    --out and --provider-runs) and joins the runs into args.out; 1 if any
    run failed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # combine.py is beside this file
    import combine

    passed, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--providers", "--out", "--provider-runs"):
            skip = True
        elif arg != "--isolate" and not arg.startswith(("--providers=", "--out=", "--provider-runs=")):
            passed.append(arg)
    out = args.out or results_dir(device_name(torch.device(args.device)))
    # the runs import the fused_ops_py this process imported
    env = dict(os.environ)
    paths = [str(Path(fo.__file__).resolve().parent.parent), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    with tempfile.TemporaryDirectory() as temporary:
        parts = args.provider_runs or temporary
        failed = 0
        for provider in args.providers:
            part = Path(parts) / provider
            # a results file left by an earlier run in a kept folder would be
            # joined as this run's if this one died before writing its own
            (part / "results.json").unlink(missing_ok=True)
            print(f"== {provider}: its own process", flush=True)
            failed |= subprocess.run(
                [sys.executable, __file__, *passed, "--providers", provider, "--out", str(part)], env=env
            ).returncode
        # a run that died wrote nothing: the others are still joined
        written = [Path(parts) / p for p in args.providers if (Path(parts) / p / "results.json").exists()]
        if not written:
            print("no provider's run wrote results", flush=True)
            return 1
        summary, count = combine.combine(out, written)
    print("\n" + summary)
    print(f"{count} rows from {len(args.providers)} processes -> {out}", flush=True)
    return 1 if failed else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.isolate:
        return run_isolated(args, argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    # Timing backward alone needs retain_graph=True, which compiled backwards
    # that donate saved buffers refuse. Donation only lets the backward write
    # an output into a saved tensor's memory: the kernels are the same, though
    # compile's peak memory may read a little higher than with it.
    if hasattr(torch._functorch.config, "donated_buffer"):  # torch >= 2.5
        torch._functorch.config.donated_buffer = False
    for knob in ("recompile_limit", "cache_size_limit"):  # newer name first
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
            break
    name = device_name(device)
    out = args.out or results_dir(name)
    meta = {
        "device": name,
        "cuda": device.type == "cuda",
        "torch": torch.__version__,
        "fused_ops_py": fo.__version__,
        "python": platform.python_version(),
        "scale": SCALE,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cpu_threads": torch.get_num_threads(),  # torch's CPU ops use them all
        "argv": argv,
    }
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    start = time.perf_counter()
    meta["copy_ceiling_gbs"] = copy_ceiling_gbs(device, args)
    print(
        f"{name}: torch {meta['torch']}, fused_ops_py {meta['fused_ops_py']}, "
        f"copy ceiling {meta['copy_ceiling_gbs']:.1f} GB/s",
        flush=True,
    )
    rows = run(args, device, meta)
    meta["seconds"] = round(time.perf_counter() - start, 1)
    summary = write_outputs(rows, meta, out)
    print("\n" + summary)
    bad = sum(r["check"] != "ok" for r in rows)
    print(
        f"{len(rows)} rows, {bad} BAD, {meta['seconds']} s; wrote {out}/results.csv, results.json, summary.md",
        flush=True,
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
