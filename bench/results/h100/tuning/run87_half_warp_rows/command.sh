# Run 87: rows of 257-512 elements on 16 threads of 4 chunks each, two rows
# a warp (as torch.compile lays out fp32 rows of 512: run 59), instead of
# 32 threads of 2 (half: FO_FORWARD_HALF_WARP_ROWS=1; fp32 rows then read
# their vectors side by side, not spread), against the tree (base). Norm
# tests (new shapes 70 x 512 and 9 x 264) and memcheck on half; fused
# forward alone, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/half/libfused_ops.so timeout 100 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $W/pytest_norms_half.txt
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/half/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (512 or 264)" > $W/memcheck_half.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck_half.txt | tr '\n' ' ')"
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes bf16,fp32 --shapes 4096x512,16384x512,65536x512,4096x1024"
for v in base half base half; do bench $v fwd_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/*_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
print("op dir dtype rows cols base-1 half-2 base-3 half-4 half/base base-3/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("base-1", "half-2", "base-3", "half-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run87.tgz . && cd $OUT && rm -rf w; ls $OUT
