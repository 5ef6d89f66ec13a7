python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/meson.txt 2>&1 || { tail $OUT/meson.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck" > $OUT/pytest_norms.txt 2>&1; tail -1 $OUT/pytest_norms.txt
K="cuda and not gradcheck and (16384 or 32768 or 40008 or 9000) and (test_layer_norm or test_rms_norm)"
for tool in memcheck racecheck; do PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 99 python3 -m pytest -q -x tests/test_norms.py -k "$K" > $OUT/$tool.txt 2>&1; echo "$tool rc=$? $(grep -E 'SUMMARY|passed|failed' $OUT/$tool.txt | tr '\n' ' ')"; done
timeout 280 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwd,fwdbwd --dtypes bf16,fp16 --shapes 4096x16384,16384x16384,65536x16384,4096x65536,16384x65536 --out $OUT/shared_forward > $OUT/bench_log.txt 2>&1; echo bench rc=$?
grep -E "^\| " $OUT/bench_log.txt | cut -d'|' -f2-10
