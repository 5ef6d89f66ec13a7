#!/bin/bash
# Run 133: the deferred rows copied with an L2 priority: evict_last on their
# first copy, evict_first on their second (build "keep", the tree), against
# plain copies ("nokeep", FO_DEFERRED_L2_PRIORITY=0) and the workspace
# path ("workspace", FO_BACKWARD_HELD_PARTIALS=0): the parked tests,
# memcheck on some, then fused alone, each build twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/keep
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so timeout 200 python3 -m pytest -q -rf tests/test_norms.py \
  -k "cuda and (parked_in_dx or allocates or deterministic) and not float64 and (bfloat16 or float32)" > $OUT/pytest_keep.txt 2>&1
echo "keep tests exit=$? $(tail -1 $OUT/pytest_keep.txt)"; grep -E "^FAILED" $OUT/pytest_keep.txt | head
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 70 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx and (700 or 160) and (layer or dropout or fp32)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
W=$OUT/w; mkdir -p $W
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 60 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --dtypes bf16,fp32 --shapes 4096x16384,16384x16384,4096x65536,2048x131072 --warmup-ms 20 --rep-ms 50"
bench nokeep ab_nokeep-1 $ARGS; bench keep ab_keep-2 $ARGS; bench workspace ab_workspace-3 $ARGS
bench nokeep ab_nokeep-4 $ARGS; bench keep ab_keep-5 $ARGS; bench workspace ab_workspace-6 $ARGS
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["kernel_ms"]) * 1e3
names = ("nokeep-1", "keep-2", "workspace-3", "nokeep-4", "keep-5", "workspace-6")
print("op dir dtype rows cols | kernel us:", *names, "| nokeep/keep workspace/keep")
nan = float("nan")
for k in sorted(t):
    g = [t[k].get(n, nan) for n in names]
    print(*k, "|", *(f"{x:.1f}" for x in g), "|", f"{(g[0] + g[3]) / (g[1] + g[4]):.3f}", f"{(g[2] + g[5]) / (g[1] + g[4]):.3f}")
PY
cd $W && tar czf $OUT/run133.tgz . && cd $OUT && rm -rf w; ls $OUT
