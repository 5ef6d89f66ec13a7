# Run 89: fp32 add + RMSNorm rows of up to 2 chunks a thread (up to 4096
# elements) at 64 registers (r64: FO_FORWARD_FP32_RESIDUAL_REGISTERS=64;
# ptxas -v on sm_90: 54-64 used, no spills), four 256-thread blocks an SM,
# where the budget of their held bytes gives them 128 (64-72 used, three
# blocks an SM at 72). Against the tree (base). Norm tests on r64; fused
# forward alone, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/r64/libfused_ops.so timeout 100 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $W/pytest_norms_r64.txt
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops add_rms_norm --directions fwd,fwdbwd --dtypes fp32 --shapes 4096x512,4096x1024,4096x2048,4096x4096,16384x512,16384x1024,16384x2048,65536x1024"
for v in base r64 base r64; do bench $v fwd_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/*_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
print("op dir dtype rows cols base-1 r64-2 base-3 r64-4 r64/base base-3/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in ("base-1", "r64-2", "base-3", "r64-4")]
    print(*k, *(f"{x:.0f}" for x in g), f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run89.tgz . && cd $OUT && rm -rf w; ls $OUT
