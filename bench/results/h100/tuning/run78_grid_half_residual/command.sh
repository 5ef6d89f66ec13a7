# Run 78: run 77's change (16-bit add + RMSNorm forward at 64 registers)
# on the grid: add + RMSNorm forward and forward+backward, bf16 and fp16,
# the shapes the register kernel takes, each provider in a process of its
# own; memcheck first on the add-norm tests. The library is the tree's,
# built for sm_90 and carried in build_ab/new.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and test_add_norm_without_dropout and (bfloat16 or float16)" > $W/sanitizer_memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/sanitizer_memcheck.txt | tr '\n' ' ')"
SHAPES=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,4096x16384,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,16384x16384,65536x512,65536x1024,65536x2048,65536x4096,65536x8192,65536x16384
for dtype in bf16 fp16; do
  left=$((585 - SECONDS)); [ $dtype = bf16 ] && left=$(( (585 - SECONDS) / 2 ))
  timeout $left python3 bench/bench_ops.py --isolate --ops add_rms_norm --directions fwd,fwdbwd --dtypes $dtype \
      --shapes $SHAPES --provider-runs $W/provider_runs/$dtype --out $W/parts/half_residual_64_$dtype > $W/half_residual_64_$dtype.txt 2>&1
  echo "$dtype exit $? at ${SECONDS}s"
done
cd $W && tar czf $OUT/run78.tgz .; ls $OUT
