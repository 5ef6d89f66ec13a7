# Run 98: the session's final library (build_ab/final, the tree built
# again, from the sources of runs 96-97's vecb): the whole pytest suite on the H100,
# then racecheck on the bf16 RMSNorm tests (forward and backward kernels).
# ptxas_summary.txt: -Xptxas -v of norm.cu and bias_scale_relu.cu, compiled
# on the development machine (nvcc 13.0, sm_80 and sm_90).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 470 python3 -m pytest -q tests 2>&1 | tail -2 | tee $OUT/pytest_all.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 100 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and bfloat16 and test_rms_norm" > $OUT/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/racecheck.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/racecheck.txt)"
