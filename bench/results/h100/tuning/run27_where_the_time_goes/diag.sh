#!/usr/bin/env bash
# run 3: where the time goes at 4096x2048 bf16 LayerNorm forward
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
W="-DFO_SHORT_FORWARD=8192 -DFO_SHORT_FORWARD_MIN=512 -DFO_SHORT_FORWARD_ROWS=65536 -DFO_SHORT_THREADS_4K=256"
(meson setup build/base -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false >/dev/null && ninja -C build/base >/dev/null) &
(NVCC_APPEND_FLAGS="$W" meson setup build/short -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false >/dev/null && NVCC_APPEND_FLAGS="$W" ninja -C build/short >/dev/null) &
wait
cd bench
for shape in 4096x2048 4096x4096 16384x2048; do
  FUSED_OPS_PY_LIBRARY=../build/base/libfused_ops.so python3 kernel_times.py layer_norm fwd $shape fused liger compile eager
  FUSED_OPS_PY_LIBRARY=../build/short/libfused_ops.so python3 kernel_times.py layer_norm fwd $shape fused
done 2>&1 | grep -v Warning | tee $OUT/kernel_times.txt
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
for p in base short liger; do
  lib=../build/$p/libfused_ops.so; prov=fused; [ $p = liger ] && { lib=../build/base/libfused_ops.so; prov=liger; }
  echo "===== $p"
  FUSED_OPS_PY_LIBRARY=$lib ncu --clock-control none $S -k regex:"norm_forward|_layer_norm_forward" --launch-skip 3 --launch-count 1 python3 profile_norms.py $prov layer_norm fwd 4096x2048 2>&1 | grep -v "^==PROF==" | sed -n '/Section/,$p'
done > $OUT/ncu.txt 2>&1
tail -5 $OUT/ncu.txt
