# Run 77: run 70 again, built right (NVCC_APPEND_FLAGS exported for ninja):
# the 16-bit forward with a 16-bit residual and no dropout at __maxnreg__
# 64 (FO_FORWARD_HALF_RESIDUAL_64=1, r64: four 256-thread blocks an SM at
# 4 chunks a thread) against the register budget by held bytes (base: 80
# at 2 chunks, 128 at 4). ptxas: 0 spills either way, sm_80 and sm_90.
# Norm CUDA tests on r64; add + RMSNorm forward, fused alone, each build
# timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/w
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/r64/libfused_ops.so timeout 150 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $OUT/w/pytest_norms_r64.txt
SHAPES=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,16384x16384,65536x512,65536x1024,65536x2048,65536x4096,65536x8192
bench() {  # variant, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --ops add_rms_norm --directions fwd --providers fused --dtypes bf16,fp16 \
    --shapes $SHAPES --out $OUT/w/$2 > $OUT/w/log_$2.txt 2>&1
  echo "$2 rc=$? $(grep -c '^| ' $OUT/w/log_$2.txt) rows"
}
for turn in 1 2; do for v in base r64; do bench $v ${v}-$turn; done; done
python3 - $OUT/w <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*-*/results.csv"):
    v = path.split("/")[-2]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
names = ["base-1", "r64-1", "base-2", "r64-2"]
print("op dtype shape", *names, "r64/base (mean of turns) base-2/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    print(k[0], k[1], f"{k[2]}x{k[3]}", *(f"{x:.0f}" for x in g),
          f"{(g[1] + g[3]) / (g[0] + g[2]):.3f}", f"{g[2] / g[0]:.3f}")
PY
cd $OUT && tar czf run77.tgz w && rm -rf w; ls
