# Run 50: fp32 norm forward (register kernel, kSpread), the chunks a thread
# it aims for (FO_FORWARD_FP32_TARGET_CHUNKS): 2 (main: t2, and t2b built
# again for noise) against 1 (more threads a row) and 4 (fewer); fused
# alone, rows of 512-4096 elements, where torch.compile leads by 1-16%.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions fwd --providers fused --dtypes fp32 --shapes 4096x512,4096x1024,4096x2048,4096x4096,16384x512,16384x1024,16384x2048,65536x512,65536x1024" \
 timeout 400 bench/tune.sh t2= t1=-DFO_FORWARD_FP32_TARGET_CHUNKS=1 t4=-DFO_FORWARD_FP32_TARGET_CHUNKS=4 t2b= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
cd $OUT && tar czf run50.tgz tune_* 2>/dev/null; ls
