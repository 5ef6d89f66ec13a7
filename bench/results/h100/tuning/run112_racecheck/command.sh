# Run 112: racecheck on the final library (build_ab/final) over the bf16
# LayerNorm tests with weight and bias (the held path at 4096 x 64,
# 2000 x 512, 1100 x 1024 and more): run 111's racecheck ran past its
# time limit.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and bfloat16 and test_layer_norm and weight+bias" > $OUT/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/racecheck.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/racecheck.txt)"
