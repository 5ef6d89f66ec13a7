#!/bin/bash
# Run 118: the shared-memory backward's partials parked in deferred dx rows
# (lib/cuda/norm_shared_held_partials.cuh). deferred (the tree) against
# workspace (the tree with FO_BACKWARD_HELD_PARTIALS=0): the C norm test
# with a GPU, the norm and CUDA tests, memcheck and racecheck on the new
# path, then an A/B of the wide-row backward, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/deferred
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -3) | tee $OUT/c_test_norm.txt
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so timeout 200 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda" 2>&1 | tail -4 | tee $OUT/pytest_deferred.txt
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx and (700 or 150)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and bfloat16 and parked_in_dx and 700 and (layer or no)" > $OUT/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/racecheck.txt | tr '\n' ' ')"
W=$OUT/w; mkdir -p $W; n=0
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd,fwdbwd --dtypes bf16,fp32 --shapes 4096x16384,16384x16384,4096x65536,16384x65536 --warmup-ms 20 --rep-ms 50"
for v in workspace deferred workspace deferred; do bench $v ab_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict); m = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = float(r["kernel_ms"]) * 1e3; m[k][v.split("-")[0]] = float(r["peak_extra_mib"])
print("op dir dtype rows cols | kernel us: workspace-1 deferred-2 workspace-3 deferred-4 | workspace/deferred | peak MiB workspace deferred")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("workspace-1", "deferred-2", "workspace-3", "deferred-4")]
    print(*k, "|", *(f"{x:.2f}" for x in g), "|", f"{(g[0] + g[2]) / (g[1] + g[3]):.3f}",
          "|", f"{m[k].get('workspace', float('nan')):.2f}", f"{m[k].get('deferred', float('nan')):.2f}")
PY
cd $W && tar czf $OUT/run118.tgz . && cd $OUT && rm -rf w; ls $OUT
