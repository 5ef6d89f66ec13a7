# Run 31: main with fp32's prefetch at 1 chunk (run 30's pf, now the
# default: its norm CUDA tests run here) against 16-bit rows at 1 chunk a
# thread with the prefetch (h1; 512 threads a row at 4096 elements, two
# blocks an SM at 64 registers). fp32 rows are the same kernels in both.
TEST_TARGETS=tests/test_norms.py \
BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --providers fused --dtypes bf16,fp32 --shapes 4096x512,4096x1024,4096x2048,4096x4096,16384x1024,16384x4096,65536x1024,65536x4096" \
bench/tune.sh new= h1="-DFO_BACKWARD_HALF_CHUNKS=1 -DFO_BACKWARD_PREFETCH=1"
