# Run 67: SwiGLU's and relu's grid rows up to 32M elements in every dtype
# (run 64's dense walk), each provider in a process of its own; then
# memcheck and racecheck on the norm tests that run the changed forward
# kernels (register and shared-memory, 1024-65536 columns). The library
# is the tree's, built for sm_90 and carried in build_ab/new.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
SMALL=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,16384x512,16384x1024,16384x2048,65536x512
timeout 230 python3 bench/bench_ops.py --isolate --ops swiglu,relu --directions fwd,bwd,fwdbwd --dtypes bf16,fp16,fp32 --shapes $SMALL \
    --provider-runs $W/provider_runs/swiglu_relu --out $W/parts/dense_walk_swiglu_relu > $W/dense_walk_swiglu_relu.txt 2>&1
echo "swiglu relu exit $?"; ls $W/provider_runs/swiglu_relu
SHAPES="(1024 or 4096 or 8192 or 16384 or 32768 or 65536)"
for tool in memcheck racecheck; do
  K="cuda and not gradcheck and (test_layer_norm or test_add_norm_without_dropout) and $SHAPES and (bfloat16 or float32)"
  [ $tool = racecheck ] && K="cuda and not gradcheck and (test_layer_norm or test_add_norm_without_dropout) and $SHAPES and bfloat16"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 130 compute-sanitizer --tool $tool --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "$K" > $W/sanitizer_$tool.txt 2>&1
  echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $W/sanitizer_$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $W/sanitizer_$tool.txt)"
done
cd $W && tar czf $OUT/run67.tgz .; ls $OUT
