#!/bin/bash
# Run 121: the final library (build_ab/final, the tree): the C norm test
# with a GPU, the norm and CUDA tests, memcheck on the deferred path, then
# the grid's norm backward and forward+backward rows of 16384 and 65536
# columns (the shared-memory backward) re-measured, fused alone: the peers'
# rows stand from the earlier grid (parts deferred_{bf16,fp16,fp32}).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/final
export FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -1) | tee $OUT/c_test_norm.txt
timeout 170 python3 -m pytest -q -rf tests/test_norms.py tests/test_cuda.py -k "cuda" > $OUT/pytest.txt 2>&1
echo "pytest: $(tail -1 $OUT/pytest.txt)"; grep -E "^FAILED" $OUT/pytest.txt | head
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 80 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
export PROVIDERS=fused SHAPES=4096x16384,4096x65536,16384x16384,16384x65536,65536x16384
G=bench/results/h100/tuning/grid_part.sh
for d in bf16 fp16 fp32; do bash $G deferred_${d} layer_norm,rms_norm,add_rms_norm bwd,fwdbwd $d 100; done
cd $OUT/w && tar czf $OUT/run121.tgz . && cd $OUT && rm -rf w; ls $OUT
