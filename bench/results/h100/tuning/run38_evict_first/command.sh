# Run 38: (a) reduce_sum with its loads marked evict-first (__ldcs) or not,
# at 64 bytes in flight a thread in a grid stride (run 37's best) or 16
# (the old kernel); peers (eager, compile) in their own process.
# (b) norms: fp32 forward rows of 8192 in registers at 4 chunks on 256
# threads (`new`, FO_FORWARD_FP32_WIDE=1) against main's rule (`old`), and
# the held rows' loads evict-first (`ef`, FO_HELD_EVICT_FIRST=1), forward
# and backward, bf16 and fp32.
set -u
export PYTHONUNBUFFERED=1
SHAPES=4096x512,4096x2048,4096x4096,4096x8192,16384x4096,16384x8192,65536x8192
(TEST_TARGETS=tests/test_reduce_sum.py \
 BENCH_ARGS="--ops reduce_sum --directions fwd --providers fused --dtypes bf16,fp32 --shapes $SHAPES" \
 timeout 200 bench/tune.sh g64cs= g64=-DFO_SUM_EVICT_FIRST=0 old="-DFO_SUM_BYTES=16 -DFO_SUM_EVICT_FIRST=0" \
    oldcs=-DFO_SUM_BYTES=16) 2>&1 | grep -A100 "^op dir"
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_g64cs/libfused_ops.so
timeout 90 python3 bench/bench_ops.py --ops reduce_sum --directions fwd --providers eager,compile \
    --dtypes bf16,fp32 --shapes $SHAPES --out $OUT/peers 2>&1 | grep -E "^\| " | cut -d'|' -f2-7
mkdir -p $OUT/norms
(OUT=$OUT/norms TEST_TARGETS=tests/test_norms.py \
 BENCH_ARGS="--ops layer_norm,add_rms_norm --directions fwd,bwd --providers fused --dtypes bf16,fp32 --shapes 4096x4096,16384x4096,4096x8192,16384x8192,4096x16384" \
 timeout 290 bench/tune.sh new= ef=-DFO_HELD_EVICT_FIRST=1 old=-DFO_FORWARD_FP32_WIDE=0) 2>&1 | grep -B3 -A100 "^op dir"
cd $OUT && tar czf run38.tgz tune_* peers norms 2>/dev/null; ls
