"""The markdown summaries of a bench_fp8.py run: fp8_cast.md, fp8_gate.md and
fp8_norm.md beside its csv and json, one table each, the peers' times as
ratios (x peer > 1: fused is faster) and fused's fraction of the copy ceiling.

    python bench/fp8_summary.py bench/results/h200
"""

import argparse
import json
from pathlib import Path

PEERS = ("fused-two-calls", "torchao-compile")
TITLES = {
    "fp8_cast": "FP8 casts",
    "fp8_gate": "SwiGLU with its FP8 output",
    "fp8_norm": "RMSNorm with its FP8 output",
}
WHAT = {
    "fp8_cast": "`fused_quantize_fp8(x)` against torchao.float8's dynamic-scaling math (amax, scale, clamp, "
    "convert) written in torch and compiled by `torch.compile`. Bytes: x read once, the FP8 copies and scales "
    "written once.",
    "fp8_gate": "`fused_swiglu(gate, up, fp8=recipe)` (one pass rowwise; tensorwise an amax pass, then the cast, "
    "each computing silu(gate) * up), our two calls (`fused_swiglu`, then `fused_quantize_fp8`), and silu(gate) "
    "* up with torchao.float8's cast compiled together by `torch.compile`, one graph. Bytes: gate and up read "
    "once, the FP8 copies and scales written once.",
    "fp8_norm": "`fused_rms_norm(x, w, fp8=recipe)` and `fused_add_rms_norm(x, r, w, fp8=recipe)` (rowwise "
    "one pass: the norm's register kernel casts each row while it holds it; tensorwise the norm's kernel takes "
    "each row's statistics and the max of |y| without writing y, then the cast computes y again from x or h), "
    "our two calls (the norm, then `fused_quantize_fp8`), and `F.rms_norm` (after "
    "the add) with torchao.float8's cast compiled together by `torch.compile`, one graph. Bytes: x (and the "
    "residual) read once, h written once, the FP8 copies and scales written once.",
}

# what same_bytes compares, where not every provider
SAME = {
    "fp8_norm": "fused writes our two calls' bytes and scales in every row (torchao's peer computes the norm in "
    "its own order, so its bytes may differ by a rounding)"
}


def table(rows):
    providers = [p for p in PEERS if any(r["provider"] == p for r in rows)]
    cases = {}
    for r in rows:
        cases.setdefault((r["shape"], r["recipe"]), {})[r["provider"]] = r
    head = ["shape", "recipe", "fused us", *(f"{p} us" for p in providers), *(f"x {p}" for p in providers)]
    head.append("fused % of copy")
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for (shape, recipe), by in cases.items():
        fused = by["fused"]
        cells = [shape, recipe, f"{fused['us']:.1f}"]
        cells += [f"{by[p]['us']:.1f}" for p in providers]
        cells += [f"{by[p]['us'] / fused['us']:.2f}" for p in providers]
        cells.append(f"{100 * fused['fraction_of_ceiling']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    same = all(r["same_bytes"] in (True, "") for r in rows)
    return lines, same


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    for name, title in TITLES.items():
        path = args.results / f"{name}.json"
        if not path.exists():
            continue
        run = json.loads(path.read_text())
        meta, rows = run["meta"], run["rows"]
        lines, same = table(rows)
        intro = (
            f"`bench/bench_fp8.py`: bf16 in, e4m3 out, kernel time (CUDA graph replay, L2 flushed, median), in one "
            f"run (torch {meta['torch']}). {WHAT[name]} % of the copy ceiling ({meta['copy_ceiling_gbs']} GB/s). "
            + (
                SAME.get(name, "Every provider writes the same bytes and scales in every row")
                if same
                else "Some rows' bytes differ"
            )
            + "; x peer > 1 is fused faster."
        )
        text = f"# {title} on the {meta['device'].replace('NVIDIA ', '')}\n\n{intro}\n\n" + "\n".join(lines) + "\n"
        (args.results / f"{name}.md").write_text(text)
        print(f"wrote {args.results / f'{name}.md'}")


if __name__ == "__main__":
    main()
