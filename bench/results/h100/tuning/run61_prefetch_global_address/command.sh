# Run 61: the L2 prefetch now given a .global address
# (__cvta_generic_to_global), as the PTX instruction specifies, instead of
# the generic one runs 54-60 used: the norm CUDA tests, memcheck on the 16-bit
# norm tests of 16384-65536 columns, and the bf16 backward at those widths
# (fused alone) against run 55's pf.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 60 python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1 | tee $OUT/pytest_norms.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (float16 or bfloat16) and (16384 or 32768 or 65536)" > $OUT/sanitizer_memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/sanitizer_memcheck.txt | tr '\n' ' ')"
timeout 90 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions bwd --providers fused --dtypes bf16 \
    --shapes 4096x16384,16384x16384,4096x32768,4096x65536 --out $OUT/bench 2>&1 | grep -E "^\| " | cut -d'|' -f2-6
cd $OUT && tar czf run61.tgz bench *.txt; ls
