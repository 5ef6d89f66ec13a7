# Run 64: the elementwise kernels (square, SwiGLU, relu's forward) on dense
# operands take one chunk a thread with a 32-bit index and no loops
# (for_each_chunk<DENSE>, dense_geometry): their first load issues 18
# instructions in, not 60. new (the working tree, also with runs 62-63's
# norm forward) against base (main at f290667), fused alone; relu's
# backward is unchanged (a control). CUDA tests of the three ops and
# memcheck on their CUDA tests first.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W
timeout 100 python3 -m pytest -q tests/test_square.py tests/test_swiglu.py tests/test_bias_scale_relu.py tests/test_cuda.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_square.py tests/test_swiglu.py tests/test_bias_scale_relu.py -k "cuda" > $W/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck.txt | tr '\n' ' ')"
SHAPES=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,16384x512,16384x1024,16384x2048,16384x4096,65536x512,65536x1024,65536x4096
bench() {  # variant, dtypes, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 170 python3 bench/bench_ops.py \
    --ops square,swiglu,relu --directions fwd,bwd --providers fused --dtypes $2 \
    --shapes $SHAPES --out $W/$3 > $W/log_$3.txt 2>&1
  echo "$3 $2 rc=$? $(grep -c '^| ' $W/log_$3.txt) rows"
}
bench base bf16,fp16,fp32 base; bench new bf16,fp16,fp32 new
bench base fp32,bf16 base2; bench new fp32,bf16 new2
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*/results.csv"):
    v = path.split("/")[-2]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
names = ["base", "new", "base2", "new2"]
print("op dir dtype shape", *names, "new/base new2/base2 base2/base")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(*k[:3], f"{k[3]}x{k[4]}", *(f"{x:.0f}" for x in g), f"{g[1] / g[0]:.3f}", f"{g[3] / g[2]:.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $W && tar czf $OUT/run64.tgz .; ls $OUT
