# Run 37: (a) reduce_sum's partial pass: bytes a thread loads before adding
# (FO_SUM_BYTES), contiguous ranges a block or a grid stride
# (FO_SUM_CONTIGUOUS), the number of partials (FO_SUM_BLOCKS); `old` is the
# kernel as it was (16 bytes, grid stride). Peers (eager, compile) alone in
# their own process. compute-sanitizer on reduce_sum's CUDA tests with the
# first variant. (b) fp32 norm forward rows in registers at up to 4 chunks
# a thread (x held once, 80 registers) against main (2 chunks; rows of
# 8192 then go to the shared-memory kernel).
set -u
export PYTHONUNBUFFERED=1
R=bench/results/h100
SHAPES=4096x512,4096x2048,4096x4096,4096x8192,16384x4096,16384x8192,65536x8192
(TEST_TARGETS=tests/test_reduce_sum.py \
 BENCH_ARGS="--ops reduce_sum --directions fwd --providers fused --dtypes bf16,fp32 --shapes $SHAPES" \
 timeout 240 bench/tune.sh c64= old="-DFO_SUM_BYTES=16 -DFO_SUM_CONTIGUOUS=0" g64=-DFO_SUM_CONTIGUOUS=0 \
    c16=-DFO_SUM_BYTES=16 c128=-DFO_SUM_BYTES=128 c64b512=-DFO_SUM_BLOCKS=512) 2>&1 | tail -40
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_c64/libfused_ops.so
timeout 100 python3 bench/bench_ops.py --ops reduce_sum --directions fwd --providers eager,compile \
    --dtypes bf16,fp32 --shapes $SHAPES --out $OUT/peers 2>&1 | grep -E "^\| " | cut -d'|' -f2-7
for tool in memcheck racecheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 99 \
        python3 -m pytest -q tests/test_reduce_sum.py -k cuda > $OUT/sanitizer_$tool.txt 2>&1
    echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $OUT/sanitizer_$tool.txt | tr '\n' ' ') fo:: lines $(grep -c 'fo::' $OUT/sanitizer_$tool.txt)"
done
mkdir -p $OUT/fwd
(OUT=$OUT/fwd TEST_TARGETS=tests/test_norms.py \
 BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd --providers fused --dtypes fp32 --shapes 4096x1024,4096x2048,4096x4096,4096x8192,16384x2048,16384x4096,16384x8192,65536x4096,65536x8192" \
 timeout 230 bench/tune.sh f4=-DFO_FORWARD_FP32_MAX_CHUNKS=4 base=) 2>&1 | tail -40
cd $OUT && tar czf run37.tgz tune_* peers fwd sanitizer_* 2>/dev/null; ls
