cp exp/norm_registers.cuh lib/cuda/norm_registers.cuh  # exp/norm_registers.cuh: one_copy.diff applied to 945e0e4
BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes fp16,bf16 --shapes 4096x16384,16384x16384,65536x16384" TEST_TARGETS="tests/test_norms.py::test_rms_norm" OUT=/tmp/tune timeout 200 bench/tune.sh "regs2=-DEXP_ONE_COPY -DFO_SHARED_FORWARD=0" shared= "regs1=-DFO_SHARED_FORWARD=0" > $OUT/tune_log.txt 2>&1
cp /tmp/tune/tune_table.txt $OUT/; cat $OUT/tune_table.txt; grep -E "passed|failed" $OUT/tune_log.txt
