# Run 58: as run 57, for forward+backward: the bf16 and fp16 grid rows of
# LayerNorm / RMSNorm / add + RMSNorm, each provider in a process of its
# own (the bf16 rows up to 8192 columns predated run 42's shared weight;
# from 16384 columns the backward now prefetches into L2).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
mkdir -p $OUT/parts $OUT/provider_runs
for d in bf16 fp16; do
  timeout 265 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions fwdbwd --dtypes $d \
      --provider-runs $OUT/provider_runs/${d}_fwdbwd --out $OUT/parts/prefetch_l2_${d}_fwdbwd > $OUT/prefetch_l2_${d}_fwdbwd.txt 2>&1
  echo "$d fwdbwd exit $?"; ls $OUT/provider_runs/${d}_fwdbwd
done
cd $OUT && tar czf run58.tgz parts provider_runs *.txt; ls
