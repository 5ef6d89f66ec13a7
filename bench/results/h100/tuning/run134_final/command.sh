#!/bin/bash
# Run 134: the session's final library (build_ab/final, the tree): the C
# norm test with a GPU; racecheck on the deferred path (bf16 and fp32,
# 700 x 16384: the tail now reuses the row slots); the whole pytest suite
# in two parts; then the grid's fp32 norm bwd and fwdbwd rows of 16384
# and 65536 columns, fused alone (part deferred_l2_fp32; the peers' rows
# stand).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/final
export FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -1) | tee $OUT/c_test_norm.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 60 compute-sanitizer --tool racecheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx and 700 and (layer or dropout) and not only" > $OUT/racecheck.txt 2>&1
echo "racecheck exit=$? $(grep -E 'RACECHECK SUMMARY|passed|failed' $OUT/racecheck.txt | tr '\n' ' ')"
timeout 170 python3 -m pytest -q -rf tests/test_norms.py tests/test_cuda.py -k cuda > $OUT/pytest_norms_cuda.txt 2>&1
echo "norms+cuda exit=$? $(tail -1 $OUT/pytest_norms_cuda.txt)"; grep -E "^FAILED" $OUT/pytest_norms_cuda.txt | head
timeout 230 python3 -m pytest -q -rf tests --ignore=tests/test_norms.py --ignore=tests/test_cuda.py > $OUT/pytest_rest.txt 2>&1
echo "rest exit=$? $(tail -1 $OUT/pytest_rest.txt)"; grep -E "^FAILED" $OUT/pytest_rest.txt | head
PROVIDERS=fused SHAPES=4096x16384,16384x16384,65536x16384,4096x65536,16384x65536 \
  bash bench/results/h100/tuning/grid_part.sh deferred_l2_fp32 layer_norm,rms_norm,add_rms_norm bwd,fwdbwd fp32 70
cd $OUT/w && tar czf $OUT/run134.tgz . && cd $OUT && rm -rf w; ls $OUT
