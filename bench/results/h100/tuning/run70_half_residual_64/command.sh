# Run 70: the 16-bit forward with a 16-bit residual (no dropout) at
# __maxnreg__ 64 (FO_FORWARD_HALF_RESIDUAL_64=1, new) against the register
# budget by held bytes (80 at 2 chunks a thread, 128 at 4; base). ptxas:
# 0 spills either way on sm_80/sm_90 (the dropout kernel at 4 chunks spilled
# 4-20 bytes at 64, so it keeps its budget). add + RMSNorm forward, fused
# alone, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
mkdir -p $OUT/w
timeout 150 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda and not gradcheck" 2>&1 | tail -2 | tee $OUT/w/pytest_norms.txt
SHAPES=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,16384x16384,65536x512,65536x1024,65536x2048,65536x4096,65536x8192
bench() {  # variant, dtype, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 60 python3 bench/bench_ops.py \
    --ops add_rms_norm --directions fwd --providers fused --dtypes $2 \
    --shapes $SHAPES --out $OUT/w/$3_$2 > $OUT/w/log_$3_$2.txt 2>&1
  echo "$3 $2 rc=$? $(grep -c '^| ' $OUT/w/log_$3_$2.txt) rows"
}
for dtype in bf16 fp16; do bench base $dtype base; bench new $dtype new; bench base $dtype base2; bench new $dtype new2; done
python3 - $OUT/w <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*_*/results.csv"):
    v = path.split("/")[-2].split("_")[0]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
names = ["base", "new", "base2", "new2"]
print("op dtype shape", *names, "new/base new2/base2 base2/base")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(k[0], k[1], f"{k[2]}x{k[3]}", *(f"{x:.0f}" for x in g), f"{g[1] / g[0]:.3f}", f"{g[3] / g[2]:.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $OUT && tar czf run70.tgz w && rm -rf w; ls
