#!/usr/bin/env bash
# Kernel tuning on the GPU machine: builds the library once for each
# variant (NAME=compiler flags, e.g. -D of a temporary macro around the
# change under test; the winner becomes the code, the macro goes), side by
# side, sm_90 only; then for each: the
# CUDA tests of TEST_TARGETS (default the norms; the first variant's: the
# one chosen gets the full gpu_check.sh test), and the benchmark of the
# fused norms alone.
#   bench/tune.sh "base=" "try=-DFO_TRY=1"
# BENCH_ARGS replaces the benchmark's flags (default below); results go to
# $OUT/tune_<NAME>/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/local}"
BENCH_ARGS="${BENCH_ARGS:---ops layer_norm,rms_norm,add_rms_norm --directions fwd,bwd --providers fused --dtypes bf16,fp32 --shapes 4096x4096,16384x4096,4096x65536}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
for variant in "$@"; do  # the builds run side by side
    name="${variant%%=*}" flags="${variant#*=}"
    # from scratch: a build left by an earlier variant of this name (other
    # flags) would make meson setup fail and be used as it is
    rm -rf "build/tune_$name"
    (NVCC_APPEND_FLAGS="$flags" meson setup "build/tune_$name" -Dcuda=enabled \
        -Dgpu_archs=90 -Dgpu_ptx=false >/dev/null 2>&1 && \
     NVCC_APPEND_FLAGS="$flags" ninja -C "build/tune_$name" >/dev/null) &
done
wait
export PYTHONPATH="/tmp/site:$PWD"
first=1
for variant in "$@"; do
    name="${variant%%=*}"
    export FUSED_OPS_PY_LIBRARY="$PWD/build/tune_$name/libfused_ops.so"
    mkdir -p "$OUT/tune_$name"
    echo "== $variant"
    if [ $first = 1 ]; then
        # shellcheck disable=SC2086
        python3 -m pytest -q -x ${TEST_TARGETS:-tests/test_norms.py} -k "cuda and not gradcheck" 2>&1 | tail -1
        first=0
    fi
    # shellcheck disable=SC2086
    python3 bench/bench_ops.py --out "$OUT/tune_$name" $BENCH_ARGS 2>&1 | grep -E "^\| " | cut -d'|' -f2-7
done
# every variant side by side (GB/s), one file: $OUT/tune_table.txt
python3 - "$OUT" "$@" <<'PY' | tee "$OUT/tune_table.txt"
import csv, sys
out, names = sys.argv[1], [v.split("=", 1)[0] for v in sys.argv[2:]]
table = {}
for name in names:
    for r in csv.DictReader(open(f"{out}/tune_{name}/results.csv")):
        key = (r["op"], r["direction"], f"{r['rows']}x{r['cols']}", r["dtype"], r["provider"])
        table.setdefault(key, {})[name] = f"{float(r['gbs']):.0f}" + ("" if r["check"] == "ok" else "!")
print("op dir shape dtype provider", *names)
for key, row in sorted(table.items()):
    print(*key, *(row.get(name, "-") for name in names))
PY
