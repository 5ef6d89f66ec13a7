# Run 73: run 71's cluster forward also for the rows the register kernel
# holds on 512 threads at one block an SM, which took the shared-memory
# kernel (fp32 16384 columns): FO_FORWARD_CLUSTER=2 (c2, clusters of 2
# blocks of 256 threads there), and with blocks of at most 128 threads
# (c2t128: clusters of 4 at 16384 fp32, of 8 blocks of 256 at 65536 bf16).
# base: FO_FORWARD_CLUSTER=0. CUDA norm tests on c2 and c2t128, then fused
# alone, each build timed twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/w
for v in c2 c2t128; do
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 150 python3 -m pytest -q -x tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -2 | tee $OUT/w/pytest_norms_$v.txt
done
SHAPES=4096x16384,16384x16384,4096x65536,16384x65536
bench() {  # variant, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 100 python3 bench/bench_ops.py \
    --ops layer_norm,rms_norm --directions fwd --providers fused --dtypes bf16,fp32 \
    --shapes $SHAPES --out $OUT/w/$2 > $OUT/w/log_$2.txt 2>&1
  echo "$2 rc=$? $(grep -c '^| ' $OUT/w/log_$2.txt) rows"
}
for turn in 1 2; do for v in base c2 c2t128; do bench $v ${v}-$turn; done; done
python3 - $OUT/w <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob
out = sys.argv[1]; t = {}
for path in glob.glob(f"{out}/*-*/results.csv"):
    v = path.split("/")[-2]
    for r in csv.DictReader(open(path)):
        t.setdefault((r["op"], r["dtype"], int(r["rows"]), int(r["cols"])), {})[v] = float(r["gbs"])
names = ["base-1", "c2-1", "c2t128-1", "base-2", "c2-2", "c2t128-2"]
print("op dtype shape", *names, "c2/base c2t128/base (mean of turns) base-2/base-1")
for k in sorted(t):
    g = [t[k].get(n, float("nan")) for n in names]
    b = (g[0] + g[3]) / 2
    print(k[0], k[1], f"{k[2]}x{k[3]}", *(f"{x:.0f}" for x in g),
          f"{(g[1] + g[4]) / 2 / b:.3f}", f"{(g[2] + g[5]) / 2 / b:.3f}", f"{g[3] / g[0]:.3f}")
PY
cd bench && for v in c2 c2t128; do FUSED_OPS_PY_LIBRARY=$PWD/../build_ab/$v/libfused_ops.so timeout 60 python3 kernel_times.py layer_norm fwd 4096x16384 fused fp32 2>&1 | grep " us " | sed "s/^/$v /"; done | tee $OUT/w/kernels.txt
cd $OUT && tar czf run73.tgz w && rm -rf w; ls
