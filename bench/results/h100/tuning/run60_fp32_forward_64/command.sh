# Run 60: run 59's ncu showed the fp32 register forward at 4096 x 512 in
# 1.29 waves (80 registers: three 256-thread blocks an SM, 396 at once for
# 512), torch.compile's kernel in 0.78. one2: x counted once at 2 chunks a
# thread (FO_FORWARD_FP32_ONE_COPY_CHUNKS=2: 64 registers, four blocks an
# SM) against main (base, which counts it twice there); fused alone, fp32
# LayerNorm and RMSNorm forward at 512-4096 columns. Norm tests on one2.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes fp32 --shapes 4096x512,4096x1024,4096x2048,4096x4096,16384x512,16384x1024,16384x2048,16384x4096,65536x512,65536x1024,65536x2048,65536x4096" \
 timeout 400 bench/tune.sh one2=-DFO_FORWARD_FP32_ONE_COPY_CHUNKS=2 base= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
cd $OUT && tar czf run60.tgz tune_* 2>/dev/null; ls
