SH=4096x8192,16384x8192,4096x16384,16384x16384,65536x16384,4096x65536
TEST_TARGETS="tests/test_norms.py" BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes bf16,fp32 --shapes $SH" OUT=/tmp/tune timeout 420 bench/tune.sh "r40=-DFO_SHARED_FORWARD_REGISTERS=40" base= "r48u2=-DFO_SHARED_FORWARD_REGISTERS=48 -DFO_SHARED_OUTPUT_UNROLL=2" "u4=-DFO_SHARED_OUTPUT_UNROLL=4" "r40sh16=-DFO_SHARED_FORWARD_REGISTERS=40 -DFO_SHARED_TARGET_CHUNKS=16" "noshared=-DFO_SHARED_FORWARD=0" > $OUT/tune_log.txt 2>&1
cp /tmp/tune/tune_table.txt $OUT/
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_base/libfused_ops.so
timeout 150 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwd --providers fused,liger,compile --dtypes bf16,fp32 --shapes $SH --out /tmp/peers > $OUT/peers_log.txt 2>&1; cp /tmp/peers/results.csv $OUT/peers.csv
grep -E "passed|failed" $OUT/tune_log.txt | head; cat $OUT/tune_table.txt
grep -E "^\| " $OUT/peers_log.txt | cut -d'|' -f2-8
