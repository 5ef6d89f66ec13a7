# Run 83: run 82 found fp32 rows of 16384 faster in the register kernel
# (512 threads, 80 registers, one block an SM) than in the shared-memory
# kernel; the tree now sends them there (build_ab/new; base is the tree
# before). Here: the norm CUDA tests on new; memcheck on new's fp32 rows of
# 9000-16384; the grid rows it changes, each provider in a process of its
# own (parts/fp32_rows_in_registers); and, since run 82 found smaller blocks
# of short rows slower, larger ones: FO_FORWARD_BLOCK_THREADS=512 (bt512)
# and 1024 (bt1024, 16-bit rows only) against base, timed first and last.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W=$OUT/w; mkdir -p $W/parts $W/provider_runs; n=0
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so timeout 100 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $W/pytest_norms_new.txt
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and float32 and (9000 or 16384)" > $W/memcheck_new.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck_new.txt | tr '\n' ' ')"
bench() {  # variant, label, bench args...
  local v=$1 label=$2; shift 2
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 120 python3 bench/bench_ops.py \
    --providers fused --out $W/$label "$@" > $W/log_$label.txt 2>&1
  echo "$label rc=$? $(grep -c '^| ' $W/log_$label.txt) rows $(date +%T)"
}
SHORT="--ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes bf16 --shapes 4096x512,4096x1024,4096x2048,4096x4096,16384x512,16384x1024"
for v in base bt512 bt1024 base; do bench $v short_$v-$((++n)) $SHORT; done
for v in base new base; do bench $v fp32_$v-$((++n)) --ops layer_norm,rms_norm --directions fwd --dtypes fp32 --shapes 4096x16384,16384x16384; done
python3 - $W <<'PY' | tee $OUT/ab_table.txt
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
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so timeout 240 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm \
    --directions fwd,fwdbwd --dtypes fp32 --shapes 4096x16384,16384x16384 --provider-runs $W/provider_runs/fp32 \
    --out $W/parts/fp32_rows_in_registers > $W/grid_fp32.txt 2>&1
echo "grid exit $?"; grep -E "^\| (layer|rms)" $W/grid_fp32.txt | cut -d'|' -f2-11
cd $W && tar czf $OUT/run83.tgz .; ls $OUT
