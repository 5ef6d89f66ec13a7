# Run 56: the adopted tree (the 16-bit shared-memory backward prefetching
# its next row into L2): the norm CUDA tests; memcheck and racecheck on the
# 16-bit norm tests of 16384-65536 columns (the shared-memory kernels);
# then the bf16 grid rows of LayerNorm / RMSNorm / add + RMSNorm backward,
# each provider in a process of its own (parts/prefetch_l2_bf16_bwd).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 60 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $OUT/pytest_norms.txt
K="cuda and not gradcheck and (float16 or bfloat16) and (16384 or 32768 or 65536)"
for tool in memcheck racecheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 80 compute-sanitizer --tool $tool --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "$K" > $OUT/sanitizer_$tool.txt 2>&1
  echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $OUT/sanitizer_$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/sanitizer_$tool.txt)"
done
mkdir -p $OUT/parts
timeout 250 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions bwd --dtypes bf16 \
    --out $OUT/parts/prefetch_l2_bf16_bwd > $OUT/prefetch_l2_bf16_bwd.txt 2>&1; echo "bf16 bwd exit $?"
grep -E "^\| " $OUT/parts/*/summary.md | cut -d'|' -f2-10 | grep -v "8x64" | head -80
cd $OUT && tar czf run56.tgz parts *.txt; ls
