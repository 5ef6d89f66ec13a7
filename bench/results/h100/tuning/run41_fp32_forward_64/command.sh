# Run 41: fp32 forward rows held once (4 chunks a thread) capped at 64
# registers (r64: 16 bytes of spills on sm_90), so four 256-thread blocks an
# SM at 8192 columns and two of 512 at 16384 (which then leave the
# shared-memory kernel), against main (80 registers; base). Norm tests on r64.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS=tests/test_norms.py \
 BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes fp32 --shapes 4096x8192,16384x8192,65536x8192,4096x16384,16384x16384" \
 timeout 500 bench/tune.sh r64=-DFO_FORWARD_FP32_ONE_COPY_REGISTERS=64 base= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
cd $OUT && tar czf run41.tgz tune_* 2>/dev/null; ls
