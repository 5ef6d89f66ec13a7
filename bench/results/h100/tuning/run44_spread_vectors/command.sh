# Run 44: fp32/fp64 chunks with their 16-byte vectors spread over the warp
# (kSpread: each warp load moves 512 contiguous bytes) against side by side
# (FO_SPREAD_VECTORS=0, as before), for square and SwiGLU; fused alone;
# bf16 as a control (one vector a chunk: the same code). Square and SwiGLU
# CUDA tests on spread, and memcheck on them.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_square.py tests/test_swiglu.py" \
 BENCH_ARGS="--ops square,swiglu --directions fwd,bwd --providers fused --dtypes fp32,bf16 --shapes 4096x512,4096x1024,4096x4096,16384x1024,16384x4096,65536x1024,65536x4096,16384x16384" \
 timeout 330 bench/tune.sh spread= side=-DFO_SPREAD_VECTORS=0 spread2= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_spread/libfused_ops.so
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_square.py tests/test_swiglu.py -k "cuda and not gradcheck" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
cd $OUT && tar czf run44.tgz tune_* 2>/dev/null; ls
