# Run 85: fp32 rows of 8193-16384 (run 83: the register kernel, 4 chunks a
# thread on 512 threads at 80 registers, one block an SM) held 8 chunks a
# thread on 256 threads at 128 registers (117-128 used, no spills), two
# blocks an SM (c8: FO_FORWARD_FP32_MAX_CHUNKS=8), against the tree (base).
# At 4096 rows one block an SM makes 31.03 waves; two blocks, half the last
# wave's idle time, and one block's loads during the other's row sums.
# Norm tests on c8; fused forward alone, each build timed twice in turn;
# then the whole pytest suite on c8.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/c8/libfused_ops.so timeout 100 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $W/pytest_norms_c8.txt
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd,fwdbwd --dtypes fp32 --shapes 4096x8192,4096x16384,16384x16384"
for v in base c8 base c8; do bench $v fp32_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/*_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
print("op dir dtype rows cols base-1 c8-2 base-3 c8-4 c8/base base-3/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("base-1", "c8-2", "base-3", "c8-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/c8/libfused_ops.so timeout 430 python3 -m pytest -q -x tests 2>&1 | tail -3 | tee $W/pytest_all_c8.txt
cd $W && tar czf $OUT/run85.tgz . && cd $OUT && rm -rf w; ls $OUT
