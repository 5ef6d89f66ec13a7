#!/bin/bash
# Run 125: defer_plan relaxed to every call with a parameter's gradient and
# a row buffer of T to park in (dbias alone, an fp32 residual stream,
# dropout with both gradients, a gradient at residual_out: before, the
# workspace path). relaxed (the tree) against workspace (the tree with
# FO_BACKWARD_HELD_PARTIALS=0): the C norm test with a GPU, the parked
# tests (which now assert no workspace on an H100), memcheck on the new
# kinds, then time_kinds.py with each build twice in turn.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
D=$PWD/build_ab/final
(cd $D && FO_TEST_HAS_GPU=1 LD_LIBRARY_PATH=$D ./test_norm 2>&1 | tail -3) | tee $OUT/c_test_norm.txt
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so timeout 150 python3 -m pytest -q -rf tests/test_norms.py -k "cuda and parked_in_dx" > $OUT/pytest_parked.txt 2>&1
echo "parked exit=$? $(tail -1 $OUT/pytest_parked.txt)"; grep -E "^FAILED" $OUT/pytest_parked.txt | head -20
FUSED_OPS_PY_LIBRARY=$D/libfused_ops.so PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
    python3 -m pytest -q tests/test_norms.py -k "cuda and (bfloat16 or float32) and parked_in_dx and (700 or 150) and (only or fp32 or dropout or residual_out)" > $OUT/memcheck.txt 2>&1
echo "memcheck exit=$? $(grep -E 'ERROR SUMMARY|passed|failed' $OUT/memcheck.txt | tr '\n' ' ')"
n=0
T=bench/results/h100/tuning/run125_relaxed_kinds/time_kinds.py
for v in workspace final workspace final; do
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 60 python3 $T > $OUT/time_$v-$((++n)).txt 2>&1
  echo "$v rc=$? $(wc -l < $OUT/time_$v-$n.txt) lines $(date +%T)"
done
paste $OUT/time_workspace-1.txt $OUT/time_final-2.txt $OUT/time_workspace-3.txt $OUT/time_final-4.txt | \
  awk '{printf "%s %s %s %s | ws %s %s | parked %s %s | ws/parked %.3f | bytes ws %s parked %s\n", $1,$2,$3,$4,$5,$17,$11,$23,($5+$17)/($11+$23),$6,$12}' | tee $OUT/ab_table.txt
