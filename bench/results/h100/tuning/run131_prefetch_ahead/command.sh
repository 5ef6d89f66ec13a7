#!/bin/bash
# Run 131: the 16-bit shared-memory backward prefetching dy and h into L2
# 2 or 3 rows of the block ahead (builds ahead2, ahead3:
# FO_BACKWARD_PREFETCH_ROWS), against 1 (final, the tree): the norm tests
# at 16384 and 65536 columns on ahead2, then fused alone, each build twice
# in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/ahead2/libfused_ops.so timeout 90 python3 -m pytest -q -rf tests/test_norms.py \
  -k "cuda and (16384 or 65536) and (parked_in_dx or allocates or deterministic) and (bfloat16 or float16) and not fp32" > $OUT/pytest_ahead2.txt 2>&1
echo "ahead2 tests exit=$? $(tail -1 $OUT/pytest_ahead2.txt)"; grep -E "^FAILED" $OUT/pytest_ahead2.txt | head
W=$OUT/w; mkdir -p $W
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd,fwdbwd --dtypes bf16,fp16 --shapes 4096x16384,16384x16384,65536x16384,4096x65536,16384x65536 --warmup-ms 20 --rep-ms 50"
bench final ab_final-1 $ARGS; bench ahead2 ab_ahead2-2 $ARGS; bench ahead3 ab_ahead3-3 $ARGS
bench final ab_final-4 $ARGS; bench ahead2 ab_ahead2-5 $ARGS; bench ahead3 ab_ahead3-6 $ARGS
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["kernel_ms"]) * 1e3
names = ("final-1", "ahead2-2", "ahead3-3", "final-4", "ahead2-5", "ahead3-6")
print("op dir dtype rows cols | kernel us:", *names, "| final/ahead2 final/ahead3")
nan = float("nan")
for k in sorted(t):
    g = [t[k].get(n, nan) for n in names]
    print(*k, "|", *(f"{x:.1f}" for x in g), "|", f"{(g[0] + g[3]) / (g[1] + g[4]):.3f}", f"{(g[0] + g[3]) / (g[2] + g[5]):.3f}")
PY
cd $W && tar czf $OUT/run131.tgz . && cd $OUT && rm -rf w; ls $OUT
