# Run 49: racecheck on the fp32 register norms and relu(x*s+b) with kSpread,
# then the fp32 grid rows of LayerNorm / RMSNorm / add + RMSNorm backward
# and forward+backward, each provider in a process of its own
# (parts/spread_norms_bwd_fp32, parts/spread_norms_fwdbwd_fp32).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py tests/test_bias_scale_relu.py \
    -k "cuda and float32 and not gradcheck and (1024 or 4096 or 8192 or 2048 or relu)" > $OUT/sanitizer_racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/sanitizer_racecheck.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/sanitizer_racecheck.txt)"
mkdir -p $OUT/parts
for d in bwd fwdbwd; do
  timeout 235 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions $d --dtypes fp32 \
      --out $OUT/parts/spread_norms_${d}_fp32 > $OUT/spread_norms_${d}_fp32.txt 2>&1; echo "norms $d exit $?"
done
grep -E "^\| " $OUT/parts/*/summary.md | cut -d'|' -f2-10 | grep -v "8x64" | head -120
cd $OUT && tar czf run49.tgz parts *.txt; ls
