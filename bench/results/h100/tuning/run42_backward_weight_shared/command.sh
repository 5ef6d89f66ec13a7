# Run 42: the 16-bit register backward reading its weight from shared
# memory (each thread's own slots, copied once; ws,
# FO_BACKWARD_WEIGHT_SHARED=1) instead of two global loads a chunk and a
# row (L1 hits), against main (base); bf16 backward, fused alone. Norm
# tests and racecheck (half types) on ws.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS=tests/test_norms.py \
 BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --providers fused --dtypes bf16 --shapes 4096x1024,4096x2048,4096x4096,4096x8192,16384x2048,16384x4096,65536x4096" \
 timeout 330 bench/tune.sh ws=-DFO_BACKWARD_WEIGHT_SHARED=1 base= base2= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_ws/libfused_ops.so
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (bfloat16 or float16)" > $OUT/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/racecheck.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/racecheck.txt)"
cd $OUT && tar czf run42.tgz tune_* 2>/dev/null; ls
