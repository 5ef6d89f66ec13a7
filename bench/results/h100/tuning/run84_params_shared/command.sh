# Run 84: the register forward holding its weight and bias in shared memory
# (PARAMS_SHARED: each thread copies its chunks there with cp.async as it
# starts, and reads them in the output pass of every row) instead of
# loading them from global memory as the output pass begins, where the
# slots cost the SM no blocks (forward_params_shared_bytes). The idea: in a
# grid of one or two waves every warp reaches its output pass at once, and
# then waits an L2 round trip for the parameters before its first store.
# ps: the tree; glob: the tree with FO_FORWARD_PARAMS_SHARED=0 (as before).
# Norm CUDA tests and memcheck/racecheck on ps; fused forward alone, each
# build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/ps/libfused_ops.so timeout 100 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $W/pytest_ps.txt
for tool in memcheck racecheck; do
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/ps/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (test_layer_norm or test_rms_norm or test_add_norm) and (bfloat16 or float32)" > $W/$tool.txt 2>&1
  echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $W/$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $W/$tool.txt)"
done
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 150 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
NORMS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes bf16,fp32 --shapes 4096x512,4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x512,16384x1024,16384x4096,65536x1024,65536x4096"
for v in glob ps glob ps; do bench $v norms_$v-$((++n)) $NORMS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/*_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
print("op dir dtype rows cols glob-1 ps-2 glob-3 ps-4 ps/glob glob-3/glob-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("glob-1", "ps-2", "glob-3", "ps-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run84.tgz . && cd $OUT && rm -rf w; ls $OUT
