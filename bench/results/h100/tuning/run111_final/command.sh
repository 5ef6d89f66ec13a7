# Run 111: the session's final library (build_ab/final, the tree): the
# whole pytest suite on the H100, then racecheck and synccheck on the
# tests that take the held path (bf16 LayerNorm, fp32 add + RMSNorm).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 420 python3 -m pytest -q tests 2>&1 | tail -2 | tee $OUT/pytest_all.txt
for tool in racecheck synccheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "cuda and not gradcheck and ((bfloat16 and test_layer_norm and weight+bias) or (float32 and test_add_norm) or allocates)" > $OUT/$tool.txt 2>&1
  echo "$tool exit=$? $(grep -E 'SUMMARY|passed|failed' $OUT/$tool.txt | tr '\n' ' ') lines naming fo:: $(grep -c 'fo::' $OUT/$tool.txt)"
done
