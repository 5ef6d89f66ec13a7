#!/bin/bash
# Run 126: run 125's parked test ran out of its 150 s in its float64 cases
# (fp64 never takes the shared-memory kernel): those one by one with their
# durations, then test_norms.py and test_cuda.py (CUDA) on the relaxed
# library without them.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 150 python3 -m pytest -v --durations=12 tests/test_norms.py -k "cuda and parked_in_dx and float64" > $OUT/pytest_fp64_parked.txt 2>&1
echo "fp64 parked exit=$? $(tail -1 $OUT/pytest_fp64_parked.txt)"; grep -E "PASSED|FAILED|s call" $OUT/pytest_fp64_parked.txt | tail -30
timeout 300 python3 -m pytest -q -rf tests/test_norms.py tests/test_cuda.py -k "cuda and not (parked_in_dx and float64)" --durations=15 > $OUT/pytest_norms_cuda.txt 2>&1
echo "norms+cuda exit=$? $(tail -1 $OUT/pytest_norms_cuda.txt)"; grep -E "^FAILED|s call" $OUT/pytest_norms_cuda.txt | head -30
