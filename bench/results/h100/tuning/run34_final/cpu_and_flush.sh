# Run 34 (a): the final tree's CPU kernels on the GPU machine's 16 cores
# (the same command as bench/results/cpu-x86-64, and bench/cpu_threads.py),
# and bench/flush_effect.py with its read-only flush working.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=80,90 && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 200 python3 bench/bench_ops.py --device cpu --dtypes fp32 --shapes 8x64,4096x1024,1024x8192 --providers fused,eager --out $OUT/cpu16 > $OUT/cpu16_log.txt 2>&1; echo cpu bench rc=$?
timeout 120 python3 bench/cpu_threads.py > $OUT/threads16.md 2>&1; cat $OUT/threads16.md
cd bench
timeout 100 python3 flush_effect.py layer_norm bwd 4096x4096 bf16 fused compile liger 2>&1 | grep -v -i warn | tee $OUT/flush.txt
timeout 60 python3 flush_effect.py layer_norm bwd 16384x4096 bf16 fused compile 2>&1 | grep -v -i warn | tee -a $OUT/flush.txt
cd $OUT && tar czf cpu16.tgz cpu16 && rm -rf cpu16
