# run 25: the final tree: every CUDA test; forward+backward with the peers
# at 8192 and 16384 columns in 16-bit types (their forward changed)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 100 python3 -m pytest -q tests -k "cuda and not gradcheck" -p no:cacheprovider > $OUT/pytest_cuda.txt 2>&1; echo pytest rc=$?; tail -1 $OUT/pytest_cuda.txt
timeout 200 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwdbwd --dtypes bf16,fp16 --shapes 4096x8192,16384x8192,65536x8192,4096x16384,16384x16384,65536x16384 --out $OUT/register_forward_fwdbwd > $OUT/bench_log.txt 2>&1; echo bench rc=$?
grep -E "^\| " $OUT/bench_log.txt | cut -d'|' -f2-10
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so; timeout 140 python3 -m pytest -q tests -k "cuda and not gradcheck and not test_norms and not test_cuda.py and not test_compile" -p no:cacheprovider > $OUT/pytest_rest.txt
