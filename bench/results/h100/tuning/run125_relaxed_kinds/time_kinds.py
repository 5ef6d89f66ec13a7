"""Run 125: the backward of the kinds of norm call that defer_plan now
parks (bias only, an fp32 residual stream, dropout with both gradients or
x's alone, a gradient at residual_out), and plain LayerNorm for reference,
with the library FUSED_OPS_PY_LIBRARY names. Time per backward (CUDA
events around 30 calls queued back to back: the GPU, not Python, paces
them at these sizes), best of 5, and the workspace each call asked for.
Prints one line per case: kind dtype rows cols us workspace_bytes."""
import sys

import torch

import fused_ops_py as fo
from fused_ops_py import _args

KINDS = ["layer", "layer, bias only", "add_rms, fp32 residual", "add_layer, dropout",
         "add_layer, dropout, x alone", "add_rms, residual_out in the loss"]


def case(kind, rows, cols, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    make = lambda shape, dt=dtype, grad=True: torch.randn(
        shape, generator=g, device="cuda", dtype=torch.float32).to(dt).requires_grad_(grad)
    x = make((rows, cols))
    residual = make((rows, cols), torch.float32 if "fp32" in kind else dtype, not kind.endswith("x alone"))
    weight, bias = make((cols,)), make((cols,))
    dy = make((rows, cols), grad=False)
    if kind == "layer":
        outs, ins = [fo.fused_layer_norm(x, weight, bias)], [x, weight, bias]
    elif kind == "layer, bias only":
        outs, ins = [fo.fused_layer_norm(x, None, bias)], [x, bias]
    elif kind.startswith("add_layer, dropout"):
        y, _ = fo.fused_add_layer_norm(x, residual, weight, bias, dropout_p=0.25)
        outs = [y]
        ins = [x, weight, bias] if kind.endswith("x alone") else [x, residual, weight, bias]
    else:
        y, h = fo.fused_add_rms_norm(x, residual, weight)
        outs, ins = [y], [x, residual, weight]
        if "residual_out" in kind:
            outs = [y, h]
    grads = [dy] + ([make(outs[1].shape, outs[1].dtype, False)] if len(outs) > 1 else [])
    return lambda: torch.autograd.grad(outs, ins, grads, retain_graph=True)


def main():
    asked = []
    ask = _args.workspace
    _args.workspace = lambda *a, **k: asked.append(ask(*a, **k)) or asked[-1]
    for rows, cols in [(4096, 16384), (16384, 16384), (4096, 65536)]:
        for dtype in (torch.bfloat16, torch.float32):
            for kind in KINDS:
                if "fp32 residual" in kind and dtype == torch.float32:
                    continue
                backward = case(kind, rows, cols, dtype)
                for _ in range(3):
                    backward()
                asked.clear()
                backward()
                ws = sum(w.numel() for w in asked if w is not None)
                best = float("inf")
                for _ in range(5):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda.synchronize()
                    start.record()
                    for _ in range(30):
                        backward()
                    end.record()
                    torch.cuda.synchronize()
                    best = min(best, start.elapsed_time(end) / 30 * 1e3)
                print(f"{kind.replace(' ', '_')} {str(dtype)[6:]} {rows} {cols} {best:.1f} {ws}", flush=True)
                del backward
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
