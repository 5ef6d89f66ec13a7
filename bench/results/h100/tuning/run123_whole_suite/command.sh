#!/bin/bash
# Run 123: the session's final library (build_ab/final, the tree): the
# whole pytest suite on the H100, then racecheck and synccheck on tests
# that take the deferred path (bf16 LayerNorm and add + RMSNorm without dx
# at 700 x 16384, a block a row; bf16 LayerNorm at 150 x 65536, clusters).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
timeout 360 python3 -m pytest -q tests 2>&1 | tail -2 | tee $OUT/pytest_all.txt
for tool in racecheck synccheck; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 50 compute-sanitizer --tool $tool --error-exitcode 99 \
      python3 -m pytest -q tests/test_norms.py -k "cuda and bfloat16 and parked_in_dx and ((700 and (layer or no)) or (150 and layer))" > $OUT/$tool.txt 2>&1
  echo "$tool exit=$? $(grep -E 'SUMMARY|passed|failed' $OUT/$tool.txt | tr '\n' ' ')"
done
