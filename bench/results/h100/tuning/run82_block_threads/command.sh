# Run 82: the block size of the short-row forward and of the dense
# elementwise walk. At 4096 x 1024 bf16 (run 59, ncu) torch.compile runs
# 4096 blocks of one warp, a row each; ours 512 blocks of 8 such warps.
# Both fit in one wave at 64 registers. Variants (tuning knobs, each build
# made with NVCC_APPEND_FLAGS exported for ninja):
#   fb32: FO_FORWARD_BLOCK_THREADS=32, FO_DENSE_BLOCK_THREADS=128,
#         FO_SHARED_FORWARD=0 (wide rows stream instead of shared memory)
#   fb64: FO_FORWARD_BLOCK_THREADS=64, FO_DENSE_BLOCK_THREADS=64
#   fb128: FO_FORWARD_BLOCK_THREADS=128
# Each knob touches its own rows: the register forward's short rows, the
# dense elementwise ops, the norm forward's wide rows. base is timed first
# and last (its spread is the noise).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/w; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/fb32/libfused_ops.so timeout 100 python3 -m pytest -q -x tests/test_norms.py tests/test_swiglu.py tests/test_square.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $OUT/w/pytest_fb32.txt
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 150 python3 bench/bench_ops.py \
    --providers fused --out $OUT/w/$label "$@" > $OUT/w/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $OUT/w/log_$label.txt) rows $(date +%T)"
}
NORMS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes bf16,fp32 --shapes 4096x512,4096x1024,4096x2048,16384x512,16384x1024,65536x1024"
for v in base fb32 fb64 fb128 base; do bench $v norms_$v-$((++n)) $NORMS; done
ELEM="--ops swiglu,square --directions fwd,bwd --dtypes bf16,fp32 --shapes 4096x512,4096x1024,4096x2048,16384x512"
for v in base fb32 fb64 base; do bench $v elem_$v-$((++n)) $ELEM; done
for v in base fb32 base; do
  bench $v wide32_$v-$((++n)) --ops layer_norm,rms_norm --directions fwd --dtypes fp32 --shapes 4096x16384,16384x16384
  bench $v wide16_$v-$((++n)) --ops layer_norm --directions fwd --dtypes bf16 --shapes 4096x65536,16384x65536
done
python3 - $OUT/w <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
out = sys.argv[1]; t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{out}/*_*-*/results.csv")):
    label = path.split("/")[-2]; v = label.split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["direction"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = float(r["gbs"])
for k in sorted(t):
    row = t[k]; bases = [x for n, x in row.items() if n.startswith("base")]
    b = sum(bases) / len(bases)
    print(*k, f"base {min(bases):.0f}-{max(bases):.0f}",
          *(f"{n.split('-')[0]} {x:.0f} ({x / b:.3f})" for n, x in sorted(row.items()) if not n.startswith("base")))
PY
cd $OUT && tar czf run82.tgz w && rm -rf w; ls
