# run 23: weight and bias prefetched (L1 or L2) at the start of the register forward
set -u
SH=4096x1024,4096x2048,4096x4096,4096x8192,16384x2048,16384x4096,65536x2048,65536x16384
TEST_TARGETS="tests/test_norms.py::test_layer_norm" BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes bf16,fp16 --shapes $SH" OUT=/tmp/tune timeout 400 bench/tune.sh base= "pl1=-DFO_FORWARD_PREFETCH_PARAMS=1" "pl2=-DFO_FORWARD_PREFETCH_PARAMS=2" > $OUT/tune_log.txt 2>&1
cp /tmp/tune/tune_table.txt $OUT/; grep -E "passed|failed" $OUT/tune_log.txt; cat $OUT/tune_table.txt
