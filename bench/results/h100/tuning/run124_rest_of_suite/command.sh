#!/bin/bash
# Run 124: run 123's whole suite ran out of time at 81%, its output cut to
# the last lines: every test file but test_norms.py and test_cuda.py (run
# 121: 884 passed) on the final library, failures listed.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 230 python3 -m pytest -q -rf tests --ignore=tests/test_norms.py --ignore=tests/test_cuda.py > $OUT/pytest_rest.txt 2>&1
echo "exit=$? $(tail -1 $OUT/pytest_rest.txt)"; grep -E "^FAILED" $OUT/pytest_rest.txt | head
