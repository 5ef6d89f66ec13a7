# Run 102: the session's final library (build_ab/pdl: run 101's, the tree's
# sources): the whole pytest suite on the H100.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/pdl/libfused_ops.so
timeout 470 python3 -m pytest -q tests 2>&1 | tail -2 | tee $OUT/pytest_all.txt
