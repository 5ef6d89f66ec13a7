#!/bin/bash
# Run 122: the deferred rows' price at 65536 x 16384 (16-bit), where the
# grid (run 121) read RMSNorm backward 4% under the earlier grid's row:
# final (the tree) against workspace (FO_BACKWARD_HELD_PARTIALS=0), fused
# alone, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W; n=0
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --dtypes bf16,fp16 --shapes 65536x16384,16384x16384 --warmup-ms 20 --rep-ms 50"
for v in workspace final workspace final; do bench $v ab_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["kernel_ms"]) * 1e3
names = ("workspace-1", "final-2", "workspace-3", "final-4")
print("op dir dtype rows cols | kernel us:", *names, "| workspace/final")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(*k, "|", *(f"{x:.2f}" for x in g), "|", f"{(g[0] + g[2]) / (g[1] + g[3]):.3f}")
PY
cd $W && tar czf $OUT/run122.tgz . && cd $OUT && rm -rf w; ls $OUT
