set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
python3 - <<'PY'
import ctypes, glob, torch
torch.cuda.init()
libs = glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcudart.so*") + glob.glob("/usr/local/lib/python3*/site-packages/nvidia/cu13/lib/libcudart.so*") + glob.glob("/usr/local/lib/python3*/*-packages/nvidia/cuda_runtime/lib/libcudart.so*")
print(libs)
rt = ctypes.CDLL(libs[0])
v = ctypes.c_int(-1)
print("cluster attr rc", rt.cudaDeviceGetAttribute(ctypes.byref(v), 120, 0), "value", v.value)
PY
cd bench
FUSED_OPS_PY_LIBRARY=$PWD/../build_ab/c512/libfused_ops.so timeout 60 python3 kernel_times.py layer_norm fwd 4096x65536 fused 2>&1 | tail -3
FUSED_OPS_PY_LIBRARY=$PWD/../build_ab/c512/libfused_ops.so timeout 60 python3 kernel_times.py layer_norm fwd 4096x16384 fused fp32 2>&1 | tail -3
