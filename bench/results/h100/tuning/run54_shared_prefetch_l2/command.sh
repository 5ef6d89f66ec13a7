# Run 54: the shared-memory norm kernels (forward: rows without a residual
# past the register kernel; backward: 8193 to 131072 columns) prefetching
# the block's next row into L2 as a row begins (FO_SHARED_PREFETCH_L2=1,
# cp.async.bulk.prefetch.L2, one instruction a warp and operand), so that
# the memory has work during the row sums. pf against main (base, and
# base2 built again: the noise). Norm tests on pf.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd,bwd --providers fused --dtypes bf16,fp32 --shapes 4096x16384,16384x16384,4096x32768,4096x65536" \
 timeout 500 bench/tune.sh pf=-DFO_SHARED_PREFETCH_L2=1 base= base2= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
cd $OUT && tar czf run54.tgz tune_* 2>/dev/null; ls
