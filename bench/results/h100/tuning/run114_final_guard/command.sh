# Run 114: the final library (build_ab/final: run 111's with the workspace
# query made on the call's device, a DeviceGuard): the norm, CUDA and
# compile tests. ptxas_summary.txt: -Xptxas -v of norm.cu and
# bias_scale_relu.cu on the development machine (nvcc 13.0, sm_80, sm_90).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 300 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py tests/test_compile.py tests/test_saved_tensors.py tests/test_robustness.py 2>&1 | tail -1 | tee $OUT/pytest.txt
