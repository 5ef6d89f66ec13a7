# Run 62: the norm forward's output in two FFMAs an element (h * rstd +
# shift, then * w + b; normalize_chunk), compiled for each case of weight
# and bias (dispatch_affine), and four accumulators for the register
# kernel's sums: fewer instructions after the loads, which a single-wave
# grid waits out. new (the working tree) against base (main at f290667),
# both built here for sm_90 and carried in build_ab/. Norm CUDA tests on
# new; then fused forward alone, bf16 and fp32, base and new in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
timeout 120 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda and not gradcheck" 2>&1 | tail -2 | tee $OUT/pytest_norms.txt
SHAPES=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,16384x16384,65536x512,65536x1024,65536x2048,65536x4096,65536x8192
for dtype in bf16 fp32; do
  for v in base new; do
    FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 150 python3 bench/bench_ops.py \
      --ops layer_norm,rms_norm,add_rms_norm --directions fwd --providers fused --dtypes $dtype \
      --shapes $SHAPES --out $OUT/${v}_$dtype > $OUT/log_${v}_$dtype.txt 2>&1
    echo "$v $dtype rc=$? $(grep -c '^| ' $OUT/log_${v}_$dtype.txt) rows"
  done
done
python3 - $OUT <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*_*/results.csv"):
    v = path.split("/")[-2].split("_")[0]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
print("op dtype shape base new new/base")
for k in sorted(t):
    b, n = t[k].get("base", float("nan")), t[k].get("new", float("nan"))
    print(k[0], k[1], f"{k[2]}x{k[3]}", f"{b:.0f}", f"{n:.0f}", f"{n / b:.3f}")
PY
cd $OUT && tar czf run62.tgz base_* new_* *.txt; ls
