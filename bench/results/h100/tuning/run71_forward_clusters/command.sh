# Run 71: the norm forward of rows longer than one block holds in registers
# (16-bit above 16384 elements, fp32 above 8192), held in registers by a
# thread block cluster of 2-8 blocks (forward_cluster_rows; row sums
# through distributed shared memory). base: FO_FORWARD_CLUSTER=0 (the
# shared-memory kernel without a residual, the streaming one with);
# c512: clusters of up to 512-thread blocks; c256: of 256-thread blocks.
# CUDA norm tests on c512 and c256, then fused alone, each build timed
# twice in turn (base c512 c256 base c512 c256).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/w
for v in c512 c256; do
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 150 python3 -m pytest -q -x tests/test_norms.py tests/test_cuda.py -k "cuda and not gradcheck" 2>&1 | tail -3 | tee $OUT/w/pytest_norms_$v.txt
done
SHAPES=4096x16384,16384x16384,4096x65536,16384x65536
bench() {  # variant, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 110 python3 bench/bench_ops.py \
    --ops layer_norm,rms_norm,add_rms_norm --directions fwd --providers fused --dtypes bf16,fp16,fp32 \
    --shapes $SHAPES --out $OUT/w/$2 > $OUT/w/log_$2.txt 2>&1
  echo "$2 rc=$? $(grep -c '^| ' $OUT/w/log_$2.txt) rows"
}
for turn in 1 2; do for v in base c512 c256; do bench $v ${v}-$turn; done; done
python3 - $OUT/w <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*-*/results.csv"):
    v = path.split("/")[-2]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
names = ["base-1", "c512-1", "c256-1", "base-2", "c512-2", "c256-2"]
print("op dtype shape", *names, "c512/base c256/base (mean of turns) base-2/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    b = (g[0] + g[3]) / 2
    print(k[0], k[1], f"{k[2]}x{k[3]}", *(f"{x:.0f}" for x in g),
          f"{(g[1] + g[4]) / 2 / b:.3f}", f"{(g[2] + g[5]) / 2 / b:.3f}", f"{g[3] / g[0]:.3f}")
PY
cd $OUT && tar czf run71.tgz w && rm -rf w; ls
