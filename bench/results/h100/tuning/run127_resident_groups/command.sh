#!/bin/bash
# Run 127: the shared-memory backward's cluster grid as many groups as the
# GPU holds at once (cudaOccupancyMaxActiveClusters: on the H100 66, 31, 15
# clusters of 2, 4, 8, up to 66, 33, 16) against the fixed counts (64, 28,
# 12; FO_RESIDENT_GROUPS=0, build "table"): fused alone, each build timed
# twice in turn, wide rows (clusters of 2, 4 and 8), bwd and fwdbwd.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 120 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd,fwdbwd --dtypes bf16,fp32 --shapes 4096x32768,4096x65536,16384x65536,2048x131072 --warmup-ms 20 --rep-ms 50"
n=1; bench table ab_table-$n $ARGS; n=2; bench final ab_final-$n $ARGS
n=3; bench table ab_table-$n $ARGS; n=4; bench final ab_final-$n $ARGS
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        k = (r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))
        t[k][v] = (float(r["kernel_ms"]) * 1e3, float(r["gbs"]))
print("op dir dtype rows cols | kernel us: table-1 final-2 table-3 final-4 | table/final | GB/s table final")
nan = (float("nan"), float("nan"))
for k in sorted(t):
    g = [t[k].get(n, nan) for n in ("table-1", "final-2", "table-3", "final-4")]
    print(*k, "|", *(f"{x[0]:.1f}" for x in g), "|", f"{(g[0][0] + g[2][0]) / (g[1][0] + g[3][0]):.3f}",
          "|", f"{(g[0][1] + g[2][1]) / 2:.0f} {(g[1][1] + g[3][1]) / 2:.0f}")
PY
cd $W && tar czf $OUT/run127.tgz . && cd $OUT && rm -rf w; ls $OUT
