#!/bin/bash
# Run 136: the shared-memory forward holding the weight and bias in shared
# memory beside a slice of the row, split across the smallest cluster of at
# least FO_SHARED_FORWARD_PARAMS blocks where both fit: builds p1 (the
# tree), p2, p4; p1rms also sends RMSNorm's long rows there
# (FO_FORWARD_CLUSTER=0) instead of the register cluster kernel; p0 the
# reworked kernel holding no parameters; main the tree before (8131231).
# The C norm test with a GPU on p1; fused forward alone, each build timed
# in turn (main and p1 to p1rms twice); then the new long-row forward tests
# and the other wide-row norm tests on p1.
set -u
tar xJf build_pack/ab.tar.xz  # the builds, packed to fit the carry
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/p1
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -1) | tee $OUT/c_test_norm.txt
W=$OUT/w; mkdir -p $W
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 50 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm --directions fwd --dtypes bf16,fp32 --shapes 4096x32768,4096x65536,16384x65536,1024x131072 --warmup-ms 10 --rep-ms 40"
bench main ab_main-1 $ARGS; bench p1 ab_p1-2 $ARGS; bench p2 ab_p2-3 $ARGS; bench p4 ab_p4-4 $ARGS; bench p1rms ab_p1rms-5 $ARGS; bench p0 ab_p0-6 $ARGS
bench main ab_main-7 $ARGS; bench p1 ab_p1-8 $ARGS; bench p2 ab_p2-9 $ARGS; bench p4 ab_p4-10 $ARGS; bench p1rms ab_p1rms-11 $ARGS
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict); ok = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["kernel_ms"]) * 1e3; ok[k][v] = r["check"]
names = ("main-1", "p1-2", "p2-3", "p4-4", "p1rms-5", "p0-6", "main-7", "p1-8", "p2-9", "p4-10", "p1rms-11")
print("op dir dtype rows cols | kernel us:", *names, "| main/X (both timings): p1 p2 p4 p1rms p0 | checks not ok")
nan = float("nan")
for k in sorted(t):
    g = {n: t[k].get(n, nan) for n in names}
    base = g["main-1"] + g["main-7"]
    ratio = lambda v, w: f"{base / (g[v] + g[w]):.3f}"
    bad = [n for n in names if ok[k].get(n, "ok") != "ok"]
    print(*k, "|", *(f"{g[n]:.1f}" for n in names), "|", ratio("p1-2", "p1-8"), ratio("p2-3", "p2-9"),
          ratio("p4-4", "p4-10"), ratio("p1rms-5", "p1rms-11"), f"{base / (2 * g['p0-6']):.3f}", "|", *bad)
PY
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so timeout 150 python3 -m pytest -q -rf tests/test_norms.py \
  -k "cuda and (long_rows or 32768 or 40008 or 65536 or 131072 or 70001)" > $OUT/pytest_p1.txt 2>&1
echo "p1 tests exit=$? $(tail -1 $OUT/pytest_p1.txt)"; grep -E "^FAILED" $OUT/pytest_p1.txt | head
cd $W && tar czf $OUT/run136.tgz . && cd $OUT && rm -rf w; ls $OUT
