# Run 66: the grid's fp32 forward rows of LayerNorm / RMSNorm / add +
# RMSNorm (runs 62-63's output pass), and square's forward and backward
# rows up to 32M elements in every dtype (run 64's dense walk), each
# provider in a process of its own. The library is the tree's, built for
# sm_90 and carried in build_ab/new.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
timeout 285 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes fp32 \
    --provider-runs $W/provider_runs/fp32_fwd --out $W/parts/forward_ffma_fp32_fwd > $W/forward_ffma_fp32_fwd.txt 2>&1
echo "fp32 fwd exit $?"; ls $W/provider_runs/fp32_fwd
SMALL=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,16384x512,16384x1024,16384x2048,65536x512
timeout 240 python3 bench/bench_ops.py --isolate --ops square --directions fwd,bwd --dtypes bf16,fp16,fp32 --shapes $SMALL \
    --provider-runs $W/provider_runs/square --out $W/parts/dense_walk_square > $W/dense_walk_square.txt 2>&1
echo "square exit $?"; ls $W/provider_runs/square
cd $W && tar czf $OUT/run66.tgz .; ls $OUT
