# Run 48: fp32 grid rows, each provider in a process of its own, on the
# kSpread tree: SwiGLU (all directions) and LayerNorm / RMSNorm /
# add + RMSNorm forward (parts/spread_swiglu_fp32, parts/spread_norms_fwd_fp32).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
mkdir -p $OUT/parts
timeout 200 python3 bench/bench_ops.py --isolate --ops swiglu --dtypes fp32 \
    --out $OUT/parts/spread_swiglu_fp32 > $OUT/spread_swiglu_fp32.txt 2>&1; echo "swiglu exit $?"
timeout 300 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions fwd --dtypes fp32 \
    --out $OUT/parts/spread_norms_fwd_fp32 > $OUT/spread_norms_fwd_fp32.txt 2>&1; echo "norms fwd exit $?"
grep -E "^\| " $OUT/parts/*/summary.md | cut -d'|' -f2-10 | grep -v "8x64" | head -120
cd $OUT && tar czf run48.tgz parts *.txt; ls
