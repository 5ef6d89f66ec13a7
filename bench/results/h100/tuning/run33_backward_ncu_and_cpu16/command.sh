# Run 33: ncu of the register backward at 4096 x 4096, bf16 (2 chunks a
# thread, 1460 GB/s) against fp32 (1 chunk with its prefetch, 2240 GB/s):
# the same block shape, bytes a row and bytes in flight a thread; and the
# CPU table and thread scaling on the GPU machine's 16 cores.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
S="--clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --launch-skip 3 --launch-count 1"
cd bench
for dt in bf16 fp32; do
    timeout 90 ncu $S -k regex:norm_backward_registers python3 profile_norms.py fused layer_norm bwd 4096x4096 $dt > $OUT/ncu_fused_ln_bwd_4096_$dt.txt 2>&1
done
cd ..
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Block Size|Grid Size|Stall" $OUT/ncu_*.txt | cut -c1-160
timeout 150 python3 bench/bench_ops.py --device cpu --dtypes fp32 --shapes 8x64,4096x1024,1024x8192 --providers fused,eager --out $OUT/cpu16 > $OUT/cpu16_log.txt 2>&1; echo cpu bench rc=$?
timeout 120 python3 bench/cpu_threads.py > $OUT/threads16.md 2>&1; cat $OUT/threads16.md
cd $OUT && tar czf cpu16.tgz cpu16 && rm -rf cpu16
