# Run 65: the grid's bf16 and fp16 forward rows of LayerNorm / RMSNorm /
# add + RMSNorm with runs 62-63's output pass (two FFMAs an element), each
# provider in a process of its own. The library is the tree's (3776d3c),
# built for sm_90 and carried in build_ab/new.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so
W=$OUT/w; mkdir -p $W/parts $W/provider_runs
for d in bf16 fp16; do
  timeout 285 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes $d \
      --provider-runs $W/provider_runs/${d}_fwd --out $W/parts/forward_ffma_${d}_fwd > $W/forward_ffma_${d}_fwd.txt 2>&1
  echo "$d fwd exit $?"; ls $W/provider_runs/${d}_fwd
done
cd $W && tar czf $OUT/run65.tgz .; ls $OUT
