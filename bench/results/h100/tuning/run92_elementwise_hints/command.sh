# Run 92: cache hints on the elementwise ops (square, SwiGLU, relu), whose
# fp32 rows trail torch.compile by 1-2% even at 1-2 GB. Builds of
# FO_ELEMENTWISE_HINTS: base 0 (none), ld 1 (loads evict-first, __ldcs),
# st 2 (stores evict-first, __stcs), ldst 3 (both). Elementwise CUDA tests on
# ldst; fused alone, each build timed twice (forward then reverse order);
# then the peers once on the same shapes.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/ldst/libfused_ops.so timeout 120 python3 -m pytest -q -x tests/test_square.py tests/test_swiglu.py tests/test_bias_scale_relu.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest_elementwise_ldst.txt
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops square,swiglu,relu --directions fwd,bwd --dtypes fp32,bf16 --shapes 4096x1024,4096x4096,16384x4096,65536x4096"
for v in base ld st ldst ldst st ld base; do bench $v fwd_$v-$((++n)) $ARGS; done
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/base/libfused_ops.so timeout 200 python3 bench/bench_ops.py \
  --providers eager,compile,liger --out $W/peers $ARGS > $W/log_peers.txt 2>&1; echo "peers rc=$?"
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict); peers = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/fwd_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1].split("-")[0]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))].setdefault(v, []).append(float(r["gbs"]))
for r in csv.DictReader(open(f"{out}/peers/results.csv")):
    peers[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][r["provider"]] = float(r["gbs"])
vs = ("base", "ld", "st", "ldst")
print("op dir dtype rows cols", *(f"{v}(a,b)" for v in vs), "best-peer", *(f"{v}/base" for v in vs[1:]), "base/peer ldst/peer")
for k in sorted(t):
    mean = {v: sum(t[k][v]) / len(t[k][v]) for v in vs if v in t[k]}
    best = max(peers[k].items(), key=lambda kv: kv[1]) if peers[k] else ("-", float("nan"))
    print(*k, *(f"{t[k][v][0]:.0f},{t[k][v][-1]:.0f}" for v in vs), f"{best[0]}:{best[1]:.0f}",
          *(f"{mean[v] / mean['base']:.3f}" for v in vs[1:]), f"{mean['base'] / best[1]:.3f}", f"{mean['ldst'] / best[1]:.3f}")
PY
cd $W && tar czf $OUT/run92.tgz . && cd $OUT && rm -rf w; ls $OUT
