"""What the chunk size costs fused_linear_cross_entropy: for chunks of 256 to
all the tokens, the time of its three cuBLAS GEMMs summed over the chunks
(logits = x_c @ W.T, grad_input_c = G_c @ W, grad_weight += G_c.T @ x_c,
the first chunk writing grad_weight), beside the whole op (forward +
backward) run at that chunk size and the logits' bytes a chunk holds. Each
GEMM timed alone by do_bench (median, L2 flushed), bf16.

    python bench/lce_chunks.py                      # 8192 x 4096 into 32000 and 128256
    python bench/lce_chunks.py --shapes 8192x4096x128256 --chunks 512,2048

Writes lce_chunks.csv and lce_chunks.md under --out (default bench/results/<gpu>/)."""

import argparse
import csv
from pathlib import Path

import torch
import triton

import fused_ops_py as fo
from fused_ops_py.ops import linear_cross_entropy

FIELDS = ["n", "h", "v", "chunk_rows", "chunk_mib", "logits_ms", "grad_input_ms", "grad_weight_ms", "gemms_ms", "op_ms"]


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60)


def gemm_times(x, w, rows):
    """(logits, grad_input, grad_weight) ms over every chunk of `rows` rows."""
    chunks = x.shape[0] // rows
    x_c = x[:rows]
    g = torch.randn(rows, w.shape[0], device=x.device, dtype=x.dtype) * 1e-3  # a chunk's gradient
    grad_input = torch.empty(rows, x.shape[1], device=x.device, dtype=x.dtype)
    grad_weight = torch.empty_like(w)
    logits = bench(lambda: torch.mm(x_c, w.t())) * chunks
    grad_in = bench(lambda: torch.mm(g, w, out=grad_input)) * chunks
    first = bench(lambda: torch.mm(g.t(), x_c, out=grad_weight))
    later = bench(lambda: grad_weight.addmm_(g.t(), x_c))
    return logits, grad_in, first + (chunks - 1) * later


def op_time(x, w, target, rows):
    """The whole op, forward + backward, its chunks set to `rows` rows."""
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    return triton.testing.do_bench(
        lambda: fo.fused_linear_cross_entropy(xg, wg, target, chunk_rows=rows).backward(),
        warmup=10,
        rep=150,
        grad_to_none=[xg, wg],
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--shapes",
        type=lambda s: [tuple(int(v) for v in x.split("x")) for x in s.split(",")],
        default=[(8192, 4096, 32000), (8192, 4096, 128256)],
        help="N x H x V, comma-separated",
    )
    p.add_argument("--chunks", type=lambda s: [int(v) for v in s.split(",")], default=[256, 512, 1024, 2048, 8192])
    p.add_argument("--out", type=Path, help="default bench/results/<gpu>/")
    args = p.parse_args(argv)
    from bench_cross_entropy import warm_up_the_gpu
    from bench_ops import device_name, results_dir

    device = torch.device("cuda", torch.cuda.current_device())
    out = Path(args.out or results_dir(device_name(device)))
    out.mkdir(parents=True, exist_ok=True)
    warm_up_the_gpu()
    rows = []
    for n, h, v in args.shapes:
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randn(n, h, device=device, dtype=torch.bfloat16, generator=gen)
        w = torch.randn(v, h, device=device, dtype=torch.bfloat16, generator=gen) * h**-0.5
        target = torch.randint(0, v, (n,), device=device, generator=gen)
        default = linear_cross_entropy.default_chunk_rows(n, h, v, x.element_size())
        for chunk in sorted(set(args.chunks) | {default}):
            if n % chunk:
                continue
            logits, grad_input, grad_weight = gemm_times(x, w, chunk)
            rows.append(
                dict(
                    n=n,
                    h=h,
                    v=v,
                    chunk_rows=f"{chunk}{' (default)' if chunk == default else ''}",
                    chunk_mib=chunk * v * x.element_size() / 2**20,
                    logits_ms=logits,
                    grad_input_ms=grad_input,
                    grad_weight_ms=grad_weight,
                    gemms_ms=logits + grad_input + grad_weight,
                    op_ms=op_time(x, w, target, chunk),
                )
            )
            print(
                " ".join(f"{k}={val:.4g}" if isinstance(val, float) else f"{k}={val}" for k, val in rows[-1].items()),
                flush=True,
            )
    with open(out / "lce_chunks.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [
        "# fused_linear_cross_entropy: the chunk size against its GEMMs' time",
        "",
        f"{device_name(device)}; torch {torch.__version__}; bf16. ms, do_bench medians; gemms_ms: the "
        "three GEMMs of every chunk, each timed alone; op_ms: forward + backward at that chunk size; "
        "chunk_mib: a chunk's logits, the op's memory beyond its inputs and gradients.",
        "",
        "| " + " | ".join(FIELDS) + " |",
        "|" + "---|" * len(FIELDS),
    ]
    lines += ["| " + " | ".join(cell(r[k]) for k in FIELDS) + " |" for r in rows]
    (out / "lce_chunks.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'lce_chunks.md'}")


if __name__ == "__main__":
    main()
