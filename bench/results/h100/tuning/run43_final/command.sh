# Run 43: the final tree (16-bit backward weight in shared memory on by
# default): the whole pytest suite, memcheck on the half-type norm tests,
# then the bf16 norm backward rows up to 8192 columns (the register
# kernel), each provider in a process of its own (parts/backward_weight_shared).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 300 python3 -m pytest -q -rs tests > $OUT/pytest.txt 2>&1; echo "pytest exit $?: $(tail -1 $OUT/pytest.txt)"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and (bfloat16 or float16)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
timeout 200 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions bwd --dtypes bf16 \
    --shapes 4096x512,4096x1024,4096x2048,4096x4096,4096x8192,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,65536x512,65536x1024,65536x2048,65536x4096,65536x8192 \
    --out $OUT/parts/backward_weight_shared > $OUT/backward_weight_shared.txt 2>&1; echo "bench exit $?"
grep -E "^\| " $OUT/parts/*/summary.md | cut -d'|' -f2-12 | head -60
cd $OUT && tar czf run43.tgz parts *.txt; ls
