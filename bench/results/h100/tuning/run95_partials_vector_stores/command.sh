# Run 95: the norm backward's weight and bias partials in 16-byte stores
# (vecp) against scalar 4-byte ones (half: run 94's adopted tree). Norm and
# CUDA tests on vecp; memcheck without torch's caching allocator on the
# LayerNorm tests (every dtype: register, shared-memory and column kernels)
# and the strided and mixed-dtype ones; fused bwd alone, timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/vecp/libfused_ops.so
timeout 130 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest_norms_cuda.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (test_layer_norm or test_strided or test_more_rows or test_mixed or test_add_norm and bfloat16)" > $W/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck.txt | tr '\n' ' ')"
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 80 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm --directions bwd --dtypes bf16,fp32 --shapes 4096x1024,4096x4096,16384x4096,4096x16384,4096x65536,65536x1024"
for v in half vecp half vecp; do bench $v bwd_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/bwd_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
print("op dir dtype rows cols half-1 vecp-2 half-3 vecp-4 vecp/half half-3/half-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("half-1", "vecp-2", "half-3", "vecp-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run95.tgz . && cd $OUT && rm -rf w; ls $OUT
