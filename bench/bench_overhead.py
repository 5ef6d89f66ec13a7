"""Host time of one call on a tiny tensor: what a user pays per call when the
kernel itself is negligible (small batches, decoding, many small layers).

For each op, fused_ops_py against torch's own op on the same machine and
device, in three modes:
  infer   forward under torch.no_grad() (no autograd bookkeeping)
  train   forward with inputs that require grad (autograd records the call)
  fwdbwd  forward + backward (torch.autograd.grad)
The time is the median over repeated batches of calls, per call. On CUDA the
calls are not synchronized one by one (that would time the GPU's latency,
not the host): each batch of calls is followed by one synchronize, counted
in the batch; the tiny kernels finish long before the host issues the next.

    python bench/bench_overhead.py                   # cuda if present, else cpu
    python bench/bench_overhead.py --device cpu --out bench/results/cpu-...

Writes overhead.csv and overhead.md under --out (default
bench/results/<device-slug>/) and prints the table.
"""

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import fused_ops_py as fo
from bench_ops import device_name, results_dir  # one results folder a device

ROWS, COLS = 8, 64  # 512 elements: the kernel is noise, the host is all
EPS = 1e-5


def ops(device):
    """{op: (fused, torch, make_inputs)}; make_inputs(requires_grad)."""

    def tensor(*shape, grad):
        return torch.randn(*shape, device=device).requires_grad_(grad)

    def x_w_b(grad):
        return tensor(ROWS, COLS, grad=grad), tensor(COLS, grad=grad), tensor(COLS, grad=grad)

    def x_w(grad):
        return tensor(ROWS, COLS, grad=grad), tensor(COLS, grad=grad)

    def x_r_w(grad):
        return tensor(ROWS, COLS, grad=grad), tensor(ROWS, COLS, grad=grad), tensor(COLS, grad=grad)

    def x_b(grad):
        return tensor(ROWS, COLS, grad=grad), tensor(COLS, grad=grad)

    def x(grad):
        return (tensor(ROWS, COLS, grad=grad),)

    def gate_up(grad):
        return tensor(ROWS, COLS, grad=grad), tensor(ROWS, COLS, grad=grad)

    return {
        "layer_norm": (lambda x, w, b: fo.fused_layer_norm(x, w, b, EPS),
                       lambda x, w, b: F.layer_norm(x, (COLS,), w, b, EPS), x_w_b),
        "rms_norm": (lambda x, w: fo.fused_rms_norm(x, w, EPS),
                     lambda x, w: F.rms_norm(x, (COLS,), w, EPS), x_w),
        "add_rms_norm": (lambda x, r, w: fo.fused_add_rms_norm(x, r, w, EPS)[0],
                         lambda x, r, w: F.rms_norm(x + r, (COLS,), w, EPS), x_r_w),
        "bias_scale_relu": (lambda x, b: fo.fused_bias_scale_relu(x, b, 0.5),
                            lambda x, b: torch.relu(x * 0.5 + b), x_b),
        "relu": (fo.relu, torch.relu, x),
        "swiglu": (fo.fused_swiglu, lambda g, u: F.silu(g) * u, gate_up),
    }


def per_call_us(fn, device, calls, batches):
    """Median over batches of (batch time / calls), in microseconds."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(calls):  # warm-up: caches, allocator, lazy init
        fn()
    sync()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def call_for(mode, fn, make_inputs):
    inputs = make_inputs(mode != "infer")
    if mode == "infer":
        def infer():
            with torch.no_grad():
                fn(*inputs)
        return infer
    if mode == "train":
        return lambda: fn(*inputs)
    dy = torch.ones(ROWS, COLS, device=inputs[0].device)
    return lambda: torch.autograd.grad(fn(*inputs), inputs, dy)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=200, help="calls a batch")
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--out")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    out = Path(args.out or results_dir(device_name(device)))
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    for op, (fused, reference, make_inputs) in ops(device).items():
        for mode in ("infer", "train", "fwdbwd"):
            fused_us = per_call_us(call_for(mode, fused, make_inputs), device, args.calls, args.batches)
            torch_us = per_call_us(call_for(mode, reference, make_inputs), device, args.calls, args.batches)
            rows.append({"op": op, "mode": mode, "fused_us": round(fused_us, 2),
                         "torch_us": round(torch_us, 2),
                         "fused_over_torch": round(fused_us / torch_us, 2)})
            print(f"{op:16} {mode:7} fused {fused_us:7.2f} us  torch {torch_us:7.2f} us  "
                  f"x{fused_us / torch_us:.2f}", flush=True)
    with open(out / "overhead.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    where = device_name(device) + ("" if device.type == "cuda" else f" ({torch.get_num_threads()} torch threads)")
    lines = [
        f"# Host time a call, {ROWS}x{COLS} fp32 on {device.type}",
        "",
        f"{where}; torch {torch.__version__}; fused_ops_py {fo.__version__}; median of "
        f"{args.batches} batches of {args.calls} calls. torch is its own op "
        "(F.layer_norm, F.rms_norm, relu(x*0.5+b), silu(g)*u, ...). "
        "fused/torch above 1 means fused costs more a call.",
        "",
        "| op | mode | fused us | torch us | fused / torch |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {r['op']} | {r['mode']} | {r['fused_us']} | {r['torch_us']} | {r['fused_over_torch']} |"
              for r in rows]
    (out / "overhead.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'overhead.csv'} and {out / 'overhead.md'}")


if __name__ == "__main__":
    main()
