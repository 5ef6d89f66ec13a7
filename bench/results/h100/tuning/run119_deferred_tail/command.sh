#!/bin/bash
# Run 119: run 118 with the tail made cheaper: the sums read 16 bytes a load,
# the deferred rows read back 8 raw vectors a thread, and (deferred, not
# nopf) moved into L2 as the barrier begins; against workspace (the tree with
# FO_BACKWARD_HELD_PARTIALS=0). The norm tests of the new path and memcheck
# on them, then the A/B, each build timed twice in turn. g128: deferred with
# 128 groups, not 132, where a row is one block's (FO_DEFERRED_GROUPS=128):
# every owner's partials then fill whole rows (4 in bf16 LayerNorm, not 5).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/deferred
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so timeout 150 python3 -m pytest -q tests/test_norms.py -k "cuda and (parked_in_dx or allocates or deterministic)" 2>&1 | tail -2 | tee $OUT/pytest_deferred.txt
for v in nopf g128; do FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 -m pytest -q tests/test_norms.py -k "cuda and (parked_in_dx or allocates)" 2>&1 | tail -1 | tee $OUT/pytest_$v.txt; done
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
W=$OUT/w; mkdir -p $W; n=0
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --dtypes bf16,fp32 --shapes 4096x16384,16384x16384,4096x65536 --warmup-ms 20 --rep-ms 50"
for v in workspace deferred nopf g128 workspace deferred nopf g128; do bench $v ab_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict); m = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["kernel_ms"]) * 1e3; m[k][v.split("-")[0]] = float(r["peak_extra_mib"])
names = ("workspace-1", "deferred-2", "nopf-3", "g128-4", "workspace-5", "deferred-6", "nopf-7", "g128-8")
print("op dir dtype rows cols | kernel us:", *names, "| workspace/deferred workspace/nopf workspace/g128")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(*k, "|", *(f"{x:.2f}" for x in g), "|", *(f"{(g[0] + g[4]) / (g[i] + g[i + 4]):.3f}" for i in (1, 2, 3)))
PY
cd $W && tar czf $OUT/run119.tgz . && cd $OUT && rm -rf w; ls $OUT
