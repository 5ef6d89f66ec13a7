"""Instructions a call of fused_ops_py's path, counted by callgrind on the CPU:
the host cost's measure that a shared machine's load does not move
(bench_overhead.py's wall times spread 10-40% between runs on a 2-core VM,
more than the 3% a change of the call path may cost). The ops and modes are
bench_overhead.py's, at 8x64 in fp32 and bf16; a count includes the CPU
kernel of those 512 elements. Each case's calls run inside one divmod(),
the only place collection is on, with a dump after it.

    python bench/host_instructions.py --out new.csv   # runs itself under valgrind
    python bench/host_instructions.py --compare old.csv new.csv

To compare two versions, run it in each version's tree (copy it into an
older one) and compare the files. Needs valgrind.
"""

import argparse
import csv
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CALLS = 100  # a case's calls inside its divmod
WARMUP = 30
MODES = ("train", "fwdbwd", "infer")
DEFAULT_OPS = "layer_norm,rms_norm,add_rms_norm,bias_scale_relu,relu,square,reduce_sum,swiglu,geglu"
SHAPE = (8, 64)


def run_cases(ops):
    """Under valgrind: each case's loop inside a divmod, its name printed first."""
    import torch
    from bench_overhead import DTYPES, OPS, make_call

    for mode in MODES:
        for op in ops:
            for dtype_name, dtype in DTYPES.items():
                ours, _, kinds = OPS[op][:3]
                with torch.set_grad_enabled(mode != "infer"):
                    call = make_call(ours, kinds, SHAPE, dtype, torch.device("cpu"), mode)
                    for _ in range(WARMUP):
                        call()

                    class Loop:
                        def __divmod__(self, other):
                            for _ in range(CALLS):
                                call()
                            return 0, 0

                    print(mode, op, dtype_name, flush=True)
                    divmod(Loop(), 1)


def measure(ops, out):
    with tempfile.TemporaryDirectory() as folder:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=builtin_divmod",
            "--dump-after=builtin_divmod",
            f"--callgrind-out-file={folder}/dump",
            sys.executable,
            __file__,
            "--cases",
            ",".join(ops),
        ]
        cases = subprocess.run(command, check=True, capture_output=True, text=True).stdout.split("\n")
        cases = [line.split() for line in cases if line.strip()]
        totals = []
        for dump in sorted(Path(folder).glob("dump.*"), key=lambda p: int(p.suffix[1:])):
            total = int(re.search(r"^totals: (\d+)", dump.read_text(), re.M).group(1))
            if total > 1000 * CALLS:  # a case's loop; torch's own divmods (at import) are a few hundred
                totals.append(total)
    if len(totals) != len(cases):
        sys.exit(f"{len(totals)} loops counted for {len(cases)} cases: a divmod inside a call splits its count")
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mode", "op", "dtype", "instructions_a_call"])
        for (mode, op, dtype), total in zip(cases, totals):
            writer.writerow([mode, op, dtype, round(total / CALLS)])
    print(f"wrote {out}: {len(cases)} cases")


def compare(old_path, new_path):
    """Prints each case's new/old and each mode's geometric mean; returns the means."""

    def read(path):
        with open(path) as f:
            return {(r["mode"], r["op"], r["dtype"]): int(r["instructions_a_call"]) for r in csv.DictReader(f)}

    old, new = read(old_path), read(new_path)
    means = {}
    for mode in MODES:
        keys = [k for k in new if k[0] == mode and k in old]
        for key in keys:
            print(f"{' '.join(key):32s} {old[key]:9d} {new[key]:9d}  new/old {new[key] / old[key]:.3f}")
        if keys:
            means[mode] = math.exp(sum(math.log(new[k] / old[k]) for k in keys) / len(keys))
            print(f"{mode}: geometric mean new/old {means[mode]:.3f} over {len(keys)} cases\n")
    return means


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=DEFAULT_OPS, help="comma list of bench_overhead.py's ops")
    parser.add_argument("--out", default="host_instructions.csv")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--cases", help=argparse.SUPPRESS)  # the run under valgrind
    args = parser.parse_args()
    if args.cases:
        run_cases(args.cases.split(","))
    elif args.compare:
        compare(*args.compare)
    else:
        measure(args.ops.split(","), args.out)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_overhead beside this file
    main()
