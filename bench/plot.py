"""PNG plots of a bench_ops.py run: GB/s against the row length N, one line
per provider, one plot per op and direction (one dtype, bf16 by default),
with the run's copy ceiling drawn across. Reads results.csv, writes
plots/<op>_<direction>_<dtype>.png beside it.

    python bench/plot.py bench/results/h200            # needs matplotlib
    python bench/plot.py bench/results/h200 --dtype fp32

Shapes of one N but several row counts M are plotted as the largest M (the
steady state: the most bytes, the least launch cost); tiny shapes (under 1M
elements) are left out, being host overhead rather than bandwidth.
"""

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

MIN_ELEMENTS = 1 << 20
STYLE = {
    "fused": ("tab:red", "o"),
    "eager": ("tab:blue", "s"),
    "compile": ("tab:green", "^"),
    "liger": ("tab:purple", "D"),
}


def load(results_dir, dtype):
    """{(op, direction): {provider: {cols: (rows, gbs)}}}, and the ceiling."""
    series = defaultdict(lambda: defaultdict(dict))
    ceiling = None
    with open(Path(results_dir) / "results.csv") as f:
        for row in csv.DictReader(f):
            if row["dtype"] != dtype or row["check"] != "ok" or not row["gbs"]:
                continue
            rows, cols = int(row["rows"]), int(row["cols"])
            if rows * cols < MIN_ELEMENTS:
                continue
            if row["fraction_of_ceiling"] and float(row["fraction_of_ceiling"]) > 0:
                ceiling = float(row["gbs"]) / float(row["fraction_of_ceiling"])
            points = series[(row["op"], row["direction"])][row["provider"]]
            if cols not in points or rows > points[cols][0]:
                points[cols] = (rows, float(row["gbs"]))
    return series, ceiling


def plot(results_dir, dtype):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("bench/plot.py needs matplotlib: pip install matplotlib")
    series, ceiling = load(results_dir, dtype)
    out = Path(results_dir) / "plots"
    out.mkdir(exist_ok=True)
    written = []
    for (op, direction), providers in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for provider, points in sorted(providers.items()):
            cols = sorted(points)
            color, marker = STYLE.get(provider, (None, "x"))
            ax.plot(cols, [points[c][1] for c in cols], label=provider, color=color, marker=marker)
        if ceiling:
            ax.axhline(ceiling, color="gray", linestyle="--", linewidth=1, label=f"copy ceiling {ceiling:.0f}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (row length; M = the largest row count run)")
        ax.set_ylabel("GB/s (fewest bytes the op must move)")
        ax.set_title(f"{op} {direction}, {dtype}")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = out / f"{op}_{direction}_{dtype}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir")
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()
    for path in plot(args.results_dir, args.dtype):
        print(path)


if __name__ == "__main__":
    main()
