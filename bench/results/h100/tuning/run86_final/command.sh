# Run 86: the session's final library (build_ab/base: the tree, built for
# sm_90 with its defaults): the whole pytest suite on the H100; racecheck on
# the fp32 norm tests of 9000 and 16384 columns (now in the register
# kernel); and the kernels the fp32 forward takes at 16384 columns.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/base/libfused_ops.so
W=$OUT/w; mkdir -p $W
timeout 430 python3 -m pytest -q tests 2>&1 | tail -3 | tee $W/pytest_all.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and float32 and (9000 or 16384)" > $W/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $W/racecheck.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $W/racecheck.txt)"
cd bench
for c in "layer_norm fwd 4096x16384 fused fp32" "rms_norm fwd 4096x16384 fused fp32"; do
  echo "== $c"; timeout 60 python3 kernel_times.py $c 2>&1 | grep " us "
done | tee $W/kernels.txt
cd $W && tar czf $OUT/run86.tgz . && cd $OUT && rm -rf w; ls $OUT
