# Run 115: the final library (build_ab/final) on the LayerNorm tests with a
# bias and no weight (the held path with dbias alone) and the parameter
# gradients without an input gradient (no dx to park in: the workspace
# path); memcheck on the bf16 ones (no caching allocator).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 120 python3 -m pytest -q tests/test_norms.py -k "cuda and (test_layer_norm or without_an_input)" 2>&1 | tail -1 | tee $OUT/pytest.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and bfloat16 and ((test_layer_norm and not weight) or without_an_input)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
