# Run 81: run 80 found the shared-memory forward's parameter loads to be
# most of its gap at 65536 columns (LayerNorm bf16 4096 x 65536: 1967 GB/s
# with weight and bias, 2727 with neither). Here it loads the weight and
# bias of 4 chunks before it uses any (FO_SHARED_PARAM_BATCH=4, pb4; 128
# registers in 16-bit instead of 40: at more than 16384 columns its shared
# memory allows one or two blocks an SM anyway) against one chunk at a
# time (base). Norm CUDA tests on pb4; LayerNorm and RMSNorm forward,
# fused alone, each build timed twice in turn; run 80's probe on pb4.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/w
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/pb4/libfused_ops.so timeout 120 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $OUT/w/pytest_norms_pb4.txt
SHAPES=4096x16384,16384x16384,4096x65536,16384x65536
bench() {  # variant, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 80 python3 bench/bench_ops.py \
    --ops layer_norm,rms_norm --directions fwd --providers fused --dtypes bf16,fp32 \
    --shapes $SHAPES --out $OUT/w/$2 > $OUT/w/log_$2.txt 2>&1
  echo "$2 rc=$? $(grep -c '^| ' $OUT/w/log_$2.txt) rows"
}
for turn in 1 2; do for v in base pb4; do bench $v ${v}-$turn; done; done
python3 - $OUT/w <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*-*/results.csv"):
    v = path.split("/")[-2]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
names = ["base-1", "pb4-1", "base-2", "pb4-2"]
print("op dtype shape", *names, "pb4/base (mean of turns) base-2/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(k[0], k[1], f"{k[2]}x{k[3]}", *(f"{x:.0f}" for x in g),
          f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/pb4/libfused_ops.so timeout 60 python3 bench/results/h100/tuning/run80_layernorm_params/probe.py 2>&1 | head -10 | tee $OUT/w/probe_pb4.txt
cd $OUT && tar czf run81.tgz w && rm -rf w; ls
