# Run 103: the norm backward's weight and bias partials parked in held dx
# rows (build_ab/held: the tree, norm_held_partials.cuh; no workspace, one
# cooperative launch) -- correctness first: the norm, CUDA (graph capture),
# compile, robustness and saved-tensor tests; memcheck (no caching
# allocator, so a write past a row is caught) and racecheck on the tests
# whose shapes take the held path.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/held/libfused_ops.so
timeout 240 python3 -m pytest -q -x tests/test_norms.py tests/test_cuda.py tests/test_compile.py tests/test_robustness.py tests/test_saved_tensors.py -k "cuda" 2>&1 | tail -15 | tee $OUT/pytest_held.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (bfloat16 or float32) and (test_layer_norm or test_add_norm or deterministic or allocates)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and bfloat16 and test_layer_norm and weight+bias" > $OUT/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/racecheck.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/racecheck.txt)"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool synccheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and bfloat16 and test_layer_norm and weight+bias" > $OUT/synccheck.txt 2>&1
echo "synccheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/synccheck.txt | tr '\n' ' ')"
