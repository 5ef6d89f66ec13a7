# Run 107: where the held scheme's time goes. held: the tree (each block
# owns a run of chunks; a warp's parking stores land in runs, not 32
# places); nohold: the same built with FO_BACKWARD_HELD_PARTIALS=0 (the
# workspace and finishing kernel); diag1: held without writing the held
# rows; diag2: held without parking or summing the partials (the barrier
# and the held rows' writes only) -- diag1 and diag2 give wrong results,
# timing only. Norm tests on held first; then fused backward alone, each
# build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/held/libfused_ops.so timeout 120 python3 -m pytest -q -x tests/test_norms.py -k "cuda" 2>&1 | tail -1 | tee $OUT/pytest_held.txt
W=$OUT/w; mkdir -p $W; n=0
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 60 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
ARGS="--ops layer_norm,rms_norm --directions bwd --dtypes bf16,fp32 --shapes 4096x512,4096x4096,4096x8192,16384x4096 --warmup-ms 20 --rep-ms 60"
for v in nohold held diag1 diag2 nohold held diag1 diag2; do bench $v ab_$v-$((++n)) $ARGS; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(lambda: collections.defaultdict(list))
for path in sorted(glob.glob(f"{out}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1].split("-")[0]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v].append(float(r["kernel_ms"]) * 1e3)
names = ("nohold", "held", "diag1", "diag2")
print("op dir dtype rows cols | kernel us, the two timings of each: " + " ".join(names))
for k in sorted(t):
    print(*k, "|", *(("/".join(f"{x:.2f}" for x in t[k][n])) for n in names))
PY
cd $W && tar czf $OUT/run107.tgz . && cd $OUT && rm -rf w; ls $OUT
