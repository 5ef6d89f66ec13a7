#!/bin/bash
# Run 130: rows of 8193-16384 elements in the shared-memory backward split
# across a cluster of 2 blocks of 256 threads, two blocks an SM (build
# "pairs", FO_SHARED_BACKWARD_PAIRS=1), against one block of 512 a row
# (build "final", the tree): the parked, memory and determinism norm tests
# at 16384 columns on pairs, then fused alone, each build twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/pairs/libfused_ops.so timeout 100 python3 -m pytest -q -rf tests/test_norms.py \
  -k "cuda and 16384 and (parked_in_dx or allocates or deterministic) and not float64" > $OUT/pytest_pairs.txt 2>&1
echo "pairs tests exit=$? $(tail -1 $OUT/pytest_pairs.txt)"; grep -E "^FAILED" $OUT/pytest_pairs.txt | head
W=$OUT/w; mkdir -p $W
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd,fwdbwd --dtypes bf16,fp32 --shapes 4096x16384,16384x16384,65536x16384 --warmup-ms 20 --rep-ms 50"
bench final ab_final-1 $ARGS; bench pairs ab_pairs-2 $ARGS
bench final ab_final-3 $ARGS; bench pairs ab_pairs-4 $ARGS
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = (float(r["kernel_ms"]) * 1e3, float(r["gbs"]))
names = ("final-1", "pairs-2", "final-3", "pairs-4")
print("op dir dtype rows cols | kernel us:", *names, "| final/pairs | GB/s final pairs")
nan = (float("nan"), float("nan"))
for k in sorted(t):
    g = [t[k].get(n, nan) for n in names]
    print(*k, "|", *(f"{x[0]:.1f}" for x in g), "|", f"{(g[0][0] + g[2][0]) / (g[1][0] + g[3][0]):.3f}",
          "|", f"{(g[0][1] + g[2][1]) / 2:.0f} {(g[1][1] + g[3][1]) / 2:.0f}")
PY
cd $W && tar czf $OUT/run130.tgz . && cd $OUT && rm -rf w; ls $OUT
