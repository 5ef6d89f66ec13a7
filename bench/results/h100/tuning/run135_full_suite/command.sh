#!/bin/bash
# Run 135: the whole pytest suite on the library of 8131231 (build_ab/main,
# sm_90), in three processes at once so that it fits one call: norms+cuda,
# test_compile, the rest. Slowest tests listed for the next split.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/main
export FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so FO_TEST_CPU_ONLY_LIBRARY=$PWD/build_ab/cpu/libfused_ops.so
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -1) | tee $OUT/c_test_norm.txt
timeout 520 python3 -m pytest -q -rf --durations=10 tests/test_norms.py tests/test_cuda.py > $OUT/pytest_norms_cuda.txt 2>&1 &
timeout 520 python3 -m pytest -q -rf --durations=10 tests/test_compile.py > $OUT/pytest_compile.txt 2>&1 &
timeout 520 python3 -m pytest -q -rf --durations=10 tests --ignore=tests/test_norms.py --ignore=tests/test_cuda.py --ignore=tests/test_compile.py > $OUT/pytest_rest.txt 2>&1 &
wait
for f in norms_cuda compile rest; do echo "$f: $(tail -1 $OUT/pytest_$f.txt)"; grep -E "^FAILED" $OUT/pytest_$f.txt | head; done
