cp exp/norm_shared.cuh lib/cuda/norm_shared.cuh  # exp/norm_shared.cuh: skip_mean_pass.diff applied
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
TEST_TARGETS="tests/test_norms.py" BENCH_ARGS="--ops rms_norm,layer_norm --directions fwd --providers fused --dtypes bf16,fp16 --shapes 4096x16384,16384x16384,65536x16384,16384x8192" OUT=/tmp/tune timeout 300 bench/tune.sh skip= "pass=-DFO_RMS_MEAN_PASS=1" > $OUT/tune_log.txt 2>&1
cp /tmp/tune/tune_table.txt $OUT/
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_skip/libfused_ops.so
cd bench
S="--clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --launch-skip 3 --launch-count 1"
timeout 60 ncu $S -k regex:norm_forward_shared python3 profile_norms.py fused rms_norm fwd 16384x16384 > $OUT/ncu_fused_rms_fwd_16384.txt 2>&1
timeout 60 ncu $S -k regex:rms_norm_forward python3 profile_norms.py liger rms_norm fwd 16384x16384 > $OUT/ncu_liger_rms_fwd_16384.txt 2>&1
cd ..; grep -E "passed|failed" $OUT/tune_log.txt; cat $OUT/tune_table.txt
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|L2 Hit|Block Limit" $OUT/ncu_*.txt
