# run 22, part 1: the final tree (fp32 back at 80 registers): CUDA tests,
# ncu of the small forward against Liger, sanitizers
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
([ -d build/gpu ] || meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false; ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 150 python3 -m pytest -q tests/test_norms.py tests/test_cuda.py -k "cuda and not gradcheck" > $OUT/pytest_cuda.txt 2>&1; tail -1 $OUT/pytest_cuda.txt
cd bench
S="--clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --launch-skip 3 --launch-count 1"
timeout 40 ncu $S -k regex:norm_forward python3 profile_norms.py fused layer_norm fwd 4096x2048 > $OUT/ncu_small.txt 2>&1
timeout 40 ncu $S -k regex:layer_norm_forward python3 profile_norms.py liger layer_norm fwd 4096x2048 >> $OUT/ncu_small.txt 2>&1
timeout 40 ncu --launch-skip 0 --launch-count 8 python3 profile_norms.py fused layer_norm fwd 4096x2048 2>&1 | grep -E "^  [a-zA-Z_].*\(|Duration" > $OUT/ncu_fused_kernels.txt
cd ..
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Waves Per SM|Theoretical Occ|No Eligible|Warp Cycles Per Issued" $OUT/ncu_small.txt
cat $OUT/ncu_fused_kernels.txt | head -20
K="cuda and not gradcheck and (4096 or 8192 or 16384 or 9000 or mixed) and (test_layer_norm or test_rms_norm or mixed)"
for tool in memcheck racecheck; do PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 99 python3 -m pytest -q -x tests/test_norms.py -k "$K" > $OUT/$tool.txt 2>&1; echo "$tool rc=$? $(grep -E 'SUMMARY|passed|failed' $OUT/$tool.txt | tr '\n' ' ')"; done
# run 22, part 2: the 16-bit forward with the peers at the register widths
# run 21 left out, and 65536 x 16384 again (fp16 read low there)
set -u
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
SHAPES=4096x1024,16384x1024,65536x1024,16384x2048,16384x4096,16384x8192,65536x16384
time timeout 400 python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwd --dtypes bf16,fp16 --shapes $SHAPES --out $OUT/register_forward_rest > $OUT/bench_log.txt 2>&1; echo bench rc=$?
grep -E "^\| " $OUT/bench_log.txt | cut -d'|' -f2-10
