#!/bin/bash
# Run 138 (twenty-fourth session): the copy ceiling at every size
# (bench/copy_by_size.py); run 137's A/B (fp32 LayerNorm rows past 16384
# elements in registers across a cluster: build lnc, FO_FORWARD_CLUSTER_LAYER=1,
# against main = HEAD's library, forward alone, each twice in turn); then at
# once: test_norms.py and test_cuda.py on CUDA against main (the files that
# run 135 ran only 95% of), and on lnc the C norm test, memcheck and
# racecheck and the norm tests of the rows it changes. Builds for sm_90 made
# on the development machine and carried packed.
set -u
tar xJf build_pack/ab.tar.xz
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FO_TEST_CPU_ONLY_LIBRARY=$PWD/build_ab/cpu/libfused_ops.so
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee $S
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/main/libfused_ops.so timeout 120 python3 bench/copy_by_size.py \
    --out $OUT > $OUT/copy_by_size.log 2>&1
echo "copy_by_size rc=$? $(grep -c 'GB/s' $OUT/copy_by_size.log) sizes" | tee -a $S
W=$OUT/w; mkdir -p $W
bench() {  # variant, label
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$1/libfused_ops.so timeout 50 python3 bench/bench_ops.py \
    --providers fused --out $W/$2 --ops layer_norm --directions fwd --dtypes fp32 \
    --shapes 4096x32768,4096x65536,16384x65536,1024x131072 --warmup-ms 10 --rep-ms 40 > $W/log_$2.txt 2>&1
  echo "$2 rc=$? $(date +%T)" | tee -a $S
}
bench main ab_main-1; bench lnc ab_lnc-2; bench main ab_main-3; bench lnc ab_lnc-4
python3 - $W <<'PY' | tee $OUT/ab_table.txt
import csv, sys, glob, collections
t = collections.defaultdict(dict)
for path in sorted(glob.glob(f"{sys.argv[1]}/ab_*-*/results.csv")):
    v = path.split("/")[-2].split("_", 1)[1]
    for r in csv.DictReader(open(path)):
        t[(r["op"], r["dtype"], int(r["rows"]), int(r["cols"]))][v] = (float(r["kernel_ms"]) * 1e3, float(r["gbs"]), r["check"])
names = ("main-1", "lnc-2", "main-3", "lnc-4")
print("op dtype rows cols | kernel us:", *names, "| main/lnc (time) | GB/s main lnc (best) | checks")
for k in sorted(t):
    g = {n: t[k].get(n, (float("nan"),) * 2 + ("-",)) for n in names}
    m = sum(g[n][0] for n in names if "main" in n); l = sum(g[n][0] for n in names if "lnc" in n)
    print(*k, "|", *(f"{g[n][0]:.1f}" for n in names), "|", f"{m / l:.3f}", "|",
          f"{max(g['main-1'][1], g['main-3'][1]):.0f} {max(g['lnc-2'][1], g['lnc-4'][1]):.0f}", "|", *(g[n][2] for n in names))
PY
M=$PWD/build_ab/main L=$PWD/build_ab/lnc
FUSED_OPS_PY_LIBRARY=$M/libfused_ops.so timeout 400 python3 -m pytest -q -rf --durations=5 \
    tests/test_norms.py tests/test_cuda.py -k cuda > $OUT/pytest_main_cuda.txt 2>&1 &
(
  (cd $L && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$L tests/test_norm 2>&1 | tail -1 | sed 's/^/lnc C norm test: /')
  export FUSED_OPS_PY_LIBRARY=$L/libfused_ops.so
  F="cuda and float32 and (32768 or 40008 or 65536 or 131072 or 70001) and (layer or add_norm)"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "$F" > $W/memcheck.txt 2>&1
  echo "lnc memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck.txt | tr '\n' ' ')"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "$F and not backward and not grad" > $W/racecheck.txt 2>&1
  echo "lnc racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $W/racecheck.txt | tr '\n' ' ')"
  timeout 150 python3 -m pytest -q -rf tests/test_norms.py tests/test_cuda.py -k "cuda and float32 and layer" > $W/pytest_lnc.txt 2>&1
  echo "lnc norm tests (cuda, fp32, layer) exit=$? $(tail -1 $W/pytest_lnc.txt)"
) >> $S 2>&1
wait
echo "main test_norms+test_cuda on CUDA: $(tail -1 $OUT/pytest_main_cuda.txt)" | tee -a $S
grep -E "^FAILED" $OUT/pytest_main_cuda.txt | head | tee -a $S
cat $S
cd $W && tar czf $OUT/run138_logs.tgz . && cd $OUT && rm -rf w; ls $OUT
