# Run 68: the whole pytest suite on the tree's library (built for sm_90,
# carried in build_ab/new); then FO_FORWARD_WIDEN=2 (the forward with a
# residual holds its 16-bit row widened to fp32 after the first pass, as
# without one ptxas already does: 5-10% fewer instructions in the SASS)
# against the tree: the norm CUDA tests on it, and add + RMSNorm's forward
# in bf16 and fp16, fused alone, each timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so timeout 340 python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tail -3 | tee $W/pytest_all.txt
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/widen/libfused_ops.so timeout 60 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $W/pytest_norms_widen.txt
SHAPES=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,16384x16384,65536x512,65536x1024,65536x2048,65536x4096,65536x8192
for v in new widen new2 widen2; do
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/${v%2}/libfused_ops.so timeout 60 python3 bench/bench_ops.py --ops add_rms_norm \
    --directions fwd --providers fused --dtypes bf16,fp16 --shapes $SHAPES --out $W/$v > $W/log_$v.txt 2>&1
  echo "$v rc=$?"
done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys
out = sys.argv[1]; t = {}
names = ["new", "widen", "new2", "widen2"]
for v in names:
    for r in csv.DictReader(open(f"{out}/{v}/results.csv")):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
print("op dtype shape", *names, "widen/new widen2/new2 new2/new")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(k[0], k[1], f"{k[2]}x{k[3]}", *(f"{x:.0f}" for x in g), f"{g[1] / g[0]:.3f}", f"{g[3] / g[2]:.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run68.tgz .; ls $OUT
