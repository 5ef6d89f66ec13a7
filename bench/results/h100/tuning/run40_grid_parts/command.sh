# Run 40: compute-sanitizer on the changed kernels (reduce_sum, fp32
# norms), then the grid rows they change, each provider in a process of
# its own: fp32 LayerNorm / RMSNorm / add + RMSNorm fwd and fwdbwd at 8192
# and 16384 columns (parts/fp32_forward_wide), reduce_sum in every dtype
# (parts/reduce_sum_evict_first).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
for tool in memcheck racecheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 \
        python3 -m pytest -q tests/test_reduce_sum.py tests/test_norms.py -k "cuda and not gradcheck and (reduce_sum or float32)" > $OUT/sanitizer_$tool.txt 2>&1
    echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' $OUT/sanitizer_$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/sanitizer_$tool.txt)"
done
mkdir -p $OUT/parts
timeout 170 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions fwd,fwdbwd \
    --dtypes fp32 --shapes 4096x8192,16384x8192,65536x8192,4096x16384,16384x16384 \
    --out $OUT/parts/fp32_forward_wide > $OUT/fp32_forward_wide.txt 2>&1; echo "norms exit $?"
timeout 230 python3 bench/bench_ops.py --isolate --ops reduce_sum --directions fwd \
    --out $OUT/parts/reduce_sum_evict_first > $OUT/reduce_sum_evict_first.txt 2>&1; echo "reduce_sum exit $?"
grep -E "^\| " $OUT/parts/*/summary.md | cut -d'|' -f2-12 | head -80
cd $OUT && tar czf run40.tgz parts *.txt; ls
