# Run 90: the tree's library (build_ab/new) with run 89's fp32 residual
# rows at 64 registers: norm and CUDA tests; memcheck on the fp32 add-norm
# tests; the grid rows it changes (fp32 add + RMSNorm at up to 4096
# columns, forward and forward+backward), each provider in a process of
# its own (parts/fp32_residual_64).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
timeout 120 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda" 2>&1 | tail -1 | tee $W/pytest_norms_cuda.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and test_add_norm and float32" > $W/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $W/memcheck.txt | tr '\n' ' ')"
timeout 300 python3 bench/bench_ops.py --isolate --ops add_rms_norm --directions fwd,fwdbwd --dtypes fp32 \
    --shapes 8x64,4096x512,4096x1024,4096x2048,4096x4096,16384x512,16384x1024,16384x2048,16384x4096,65536x512,65536x1024,65536x2048,65536x4096 \
    --provider-runs $W/provider_runs/add_rms --out $W/parts/fp32_residual_64 > $W/grid.txt 2>&1
echo "grid exit $?"; grep -E "^\| add_rms" $W/grid.txt | tail -26 | cut -d'|' -f2-10
cd $W && tar czf $OUT/run90.tgz . && cd $OUT && rm -rf w; ls $OUT
