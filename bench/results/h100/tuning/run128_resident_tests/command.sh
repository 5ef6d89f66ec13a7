#!/bin/bash
# Run 128: run 127's adopted library (the tree, build_ab/final): the C norm
# test with a GPU; the parked, memory and determinism norm tests (the
# parked shapes now (340, 32768), (160, 65536), (80, 131072), so that each
# of 66, 31 and 15 groups defers its rows); then test_norms.py and
# test_cuda.py whole (CUDA); memcheck on the cluster shapes.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/final
export FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -2) | tee $OUT/c_test_norm.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx and (65536 or 131072) and (layer or add_rms) and not (only or residual_out or fp32)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
timeout 400 python3 -m pytest -q -rf tests/test_norms.py tests/test_cuda.py -k "cuda" > $OUT/pytest_norms_cuda.txt 2>&1
echo "norms+cuda exit=$? $(tail -1 $OUT/pytest_norms_cuda.txt)"; grep -E "^FAILED" $OUT/pytest_norms_cuda.txt | head -30
