# Run 79: the final tree's library (the cluster launcher now instantiates
# residual kernels for fp32 only; built for sm_90, carried in build_ab/new):
# the norm and CUDA tests on the GPU, and the kernel the profiler names
# for RMSNorm forward at 4096 x 65536, fp32 add + RMSNorm and LayerNorm.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_norms.py tests/test_cuda.py -k cuda 2>&1 | tail -2 | tee $OUT/pytest_norms_cuda.txt
cd bench
for c in "rms_norm fwd 4096x65536 fused" "add_rms_norm fwd 4096x65536 fused fp32" "layer_norm fwd 4096x65536 fused"; do
  timeout 60 python3 kernel_times.py $c 2>&1 | grep " us "
done | tee $OUT/kernels.txt
