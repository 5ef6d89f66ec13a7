#!/usr/bin/env python3
"""Joins bench_ops.py runs made in parts (a full run outlasts one sitting on
the GPU machine) into one results folder: results.csv, results.json and
summary.md as one run would have written them. Each part keeps the copy
ceiling it measured (its rows' fraction_of_ceiling use it); the joined
meta lists every part and states their median ceiling. A case (op,
direction, shape, dtype, provider) measured in two parts keeps the later
part's row: a re-run replaces what it re-measured. The ratios between
providers are worked out again over the joined rows.

    python bench/combine.py bench/results/h100 /tmp/part1 /tmp/part2 ...
"""

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_ops  # noqa: E402  (the same writers as one run)

KEY = ("op", "direction", "rows", "cols", "dtype", "provider")


def combine(out, parts):
    rows, metas = {}, []
    for part in parts:
        with open(Path(part) / "results.json") as f:
            data = json.load(f)
        metas.append(data["meta"])
        # JSON holds NaN as null; the writers expect NaN
        for r in data["rows"]:
            rows[tuple(r[k] for k in KEY)] = {k: math.nan if v is None else v for k, v in r.items()}
    cases = {}
    for row in rows.values():
        for field in bench_ops.FIELDS:
            if "speedup_vs_" in field:
                row[field] = math.nan
        cases.setdefault(tuple(row[k] for k in KEY[:-1]), []).append(row)
    for group in cases.values():
        bench_ops.add_speedups(group)
    meta = dict(metas[0])
    meta["parts"] = [{k: m.get(k) for k in ("argv", "started", "seconds", "copy_ceiling_gbs")} for m in metas]
    meta["copy_ceiling_gbs"] = statistics.median(m["copy_ceiling_gbs"] for m in metas)
    meta["seconds"] = round(sum(m.get("seconds") or 0 for m in metas), 1)
    return bench_ops.write_outputs(list(rows.values()), meta, Path(out)), len(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("parts", nargs="+")
    args = parser.parse_args(argv)
    _, count = combine(args.out, args.parts)
    print(f"{count} rows from {len(args.parts)} parts -> {args.out}/results.csv, results.json, summary.md")


if __name__ == "__main__":
    main()
