# Run 103: the tree's final library (build_ab/check: run 102's with the
# dependent-launch query in relaxed atomics): the norm and relu(x*s+b)
# CUDA tests, as far as the session's last device seconds go.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build_ab/check/libfused_ops.so
timeout 60 python3 -m pytest -q -x tests/test_norms.py tests/test_bias_scale_relu.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $OUT/pytest.txt
