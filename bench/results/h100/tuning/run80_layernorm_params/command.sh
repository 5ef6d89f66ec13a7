# Run 80: probe.py (LayerNorm's forward with and without its parameters
# against RMSNorm's) on the final library (built for sm_90, in build_ab/new).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
timeout 150 python3 bench/results/h100/tuning/run80_layernorm_params/probe.py 2>&1 | tee $OUT/probe.txt
