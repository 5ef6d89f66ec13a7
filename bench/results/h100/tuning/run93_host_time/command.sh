# Run 93: host time a call of LayerNorm forward+backward (host_time.py).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/base/libfused_ops.so
timeout 200 python3 bench/results/h100/tuning/run93_host_time/host_time.py 2>&1 | tee $OUT/host_time.txt
