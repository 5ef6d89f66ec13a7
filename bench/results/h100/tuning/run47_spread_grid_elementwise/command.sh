# Run 47: the tree with kSpread (fp32 elementwise ops and register norms):
# memcheck and racecheck on the CUDA tests it changes, then the fp32 grid
# rows of square and relu / relu(x*s+b) (parts/spread_elementwise_fp32).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
K="cuda and not gradcheck and (float32 or float64 or dropout or test_cuda or 1024)"
for tool in memcheck racecheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 110 compute-sanitizer --tool $tool --error-exitcode 99 \
        python3 -m pytest -q tests/test_norms.py tests/test_bias_scale_relu.py tests/test_square.py tests/test_swiglu.py tests/test_cuda.py -k "$K" > $OUT/sanitizer_$tool.txt 2>&1
    echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $OUT/sanitizer_$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/sanitizer_$tool.txt)"
done
mkdir -p $OUT/parts
timeout 300 python3 bench/bench_ops.py --ops square,relu,bias_scale_relu --dtypes fp32 \
    --out $OUT/parts/spread_elementwise_fp32 > $OUT/spread_elementwise_fp32.txt 2>&1; echo "elementwise exit $?"
grep -E "^\| " $OUT/parts/*/summary.md | cut -d'|' -f2-9 | head -70
cd $OUT && tar czf run47.tgz parts *.txt; ls
