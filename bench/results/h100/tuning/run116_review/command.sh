# Run 116: the review's library (build_ab/final: whether the held rows fit
# in shared memory is now the occupancy query's answer alone, not a 40 KB
# guess beside the opt-in limit): the norm tests, the memory ones included.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 200 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda" 2>&1 | tail -1 | tee $OUT/pytest.txt
