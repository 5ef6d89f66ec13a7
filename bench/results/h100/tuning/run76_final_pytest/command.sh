# Run 76: fp32 add + RMSNorm 4096 x 65536 (run 75's part was cut by its
# 90-s limit), each provider in a process of its own; then the whole pytest
# suite on the tree's library (built for sm_90, carried in build_ab/new).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
timeout 140 python3 bench/bench_ops.py --isolate --ops add_rms_norm --directions fwd,fwdbwd --dtypes fp32 \
    --shapes 4096x65536 --provider-runs $W/provider_runs/add_rms --out $W/parts/cluster_add_rms_fp32 > $W/cluster_add_rms_fp32.txt 2>&1
echo "add_rms exit $?"; tail -8 $W/cluster_add_rms_fp32.txt
timeout 420 python3 -m pytest -q -p no:cacheprovider -rfE tests > $W/pytest_all_full.txt 2>&1
echo "pytest exit $?"; tail -3 $W/pytest_all_full.txt
cd $W && tar czf $OUT/run76.tgz .; ls $OUT
