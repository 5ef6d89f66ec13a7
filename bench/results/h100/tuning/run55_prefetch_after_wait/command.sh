# Run 55: as run 54, the next row prefetched into L2 once this thread's
# copies of the current row have landed (pfw, FO_SHARED_PREFETCH_L2=2), so
# that it does not compete with them, against run 54's prefetch as the row
# begins (pf, =1) and main (base). Run 54: pf +3-8% in the 16-bit backward,
# -6-8% in the fp32 backward, -17-20% in the fp32 forward. Tests on pfw.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd,bwd --providers fused --dtypes bf16,fp32 --shapes 4096x16384,16384x16384,4096x32768,4096x65536" \
 timeout 500 bench/tune.sh pfw=-DFO_SHARED_PREFETCH_L2=2 pf=-DFO_SHARED_PREFETCH_L2=1 base= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
cd $OUT && tar czf run55.tgz tune_* 2>/dev/null; ls
