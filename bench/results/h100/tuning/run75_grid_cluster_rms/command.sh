# Run 75: the grid rows run 74's cluster forward changes (RMSNorm at 65536
# columns; fp32 add + RMSNorm 4096 x 65536), forward and forward+backward,
# each provider in a process of its own; then memcheck and racecheck on the
# norm tests whose rows a cluster holds. The library is the tree's, built
# for sm_90 and carried in build_ab/new.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
timeout 200 python3 bench/bench_ops.py --isolate --ops rms_norm --directions fwd,fwdbwd --dtypes bf16,fp16,fp32 \
    --shapes 4096x65536,16384x65536 --provider-runs $W/provider_runs/rms --out $W/parts/cluster_rms_fwd > $W/cluster_rms_fwd.txt 2>&1
echo "rms exit $?"
timeout 90 python3 bench/bench_ops.py --isolate --ops add_rms_norm --directions fwd,fwdbwd --dtypes fp32 \
    --shapes 4096x65536 --provider-runs $W/provider_runs/add_rms --out $W/parts/cluster_add_rms_fp32 > $W/cluster_add_rms_fp32.txt 2>&1
echo "add_rms exit $?"
SHAPES="(32768 or 40008 or 65536 or 131072)"
for tool in memcheck racecheck; do
  K="cuda and not gradcheck and (((test_rms_norm or test_add_norm_without_dropout) and $SHAPES and (bfloat16 or float32)) or long_rows)"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "$K" > $W/sanitizer_$tool.txt 2>&1
  echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $W/sanitizer_$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $W/sanitizer_$tool.txt)"
done
cd $W && tar czf $OUT/run75.tgz .; ls $OUT
