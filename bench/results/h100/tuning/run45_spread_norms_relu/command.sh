# Run 45: kSpread (a chunk's two fp32 vectors spread over the warp) in the
# fp32 norms (register forward and backward, shared-memory forward) and in
# relu / relu(x*s+b) (the mask bytes gathered with shuffles), against side
# by side (FO_SPREAD_VECTORS=0); fused alone, fp32; spread2 = spread built
# again (noise). CUDA tests of the norms, relu, square, SwiGLU and
# test_cuda.py on spread.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py tests/test_bias_scale_relu.py tests/test_cuda.py tests/test_square.py tests/test_swiglu.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm,relu,bias_scale_relu --directions fwd,bwd --providers fused --dtypes fp32 --shapes 4096x1024,16384x4096,4096x8192,16384x16384" \
 timeout 500 bench/tune.sh spread= side=-DFO_SPREAD_VECTORS=0 spread2= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
cd $OUT && tar czf run45.tgz tune_* 2>/dev/null; ls
