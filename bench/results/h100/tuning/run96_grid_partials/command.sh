# Run 96: the tree's library (build_ab/vecb: runs 94-95's partials, and
# relu(x*s+b)'s bias partials in 16-byte stores): relu(x*s+b) tests and
# memcheck (no caching allocator); its backward against vecp (runs 94-95
# alone), timed twice in turn; then the grid's norm backward rows, bf16
# and fp16, with the peers (parts partials_bf16_bwd, partials_fp16_bwd).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/vecb/libfused_ops.so
timeout 60 python3 -m pytest -q tests/test_bias_scale_relu.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest_bias_scale_relu.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_bias_scale_relu.py -k "cuda and not gradcheck" > $W/memcheck_bias_scale_relu.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck_bias_scale_relu.txt | tr '\n' ' ')"
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 60 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops bias_scale_relu --directions bwd --dtypes bf16,fp32 --shapes 4096x1024,4096x4096,4096x16384,16384x4096,65536x1024"
for v in vecp vecb vecp vecb; do bench $v bwd_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/bwd_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
print("op dir dtype rows cols vecp-1 vecb-2 vecp-3 vecb-4 vecb/vecp vecp-3/vecp-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("vecp-1", "vecb-2", "vecp-3", "vecb-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
G=bench/results/h100/tuning/grid_part.sh
bash $G partials_bf16_bwd layer_norm,rms_norm,add_rms_norm bwd bf16 230
bash $G partials_fp16_bwd layer_norm,rms_norm,add_rms_norm bwd fp16 230
cd $W && tar czf $OUT/run96.tgz . && cd $OUT && rm -rf w; ls $OUT
