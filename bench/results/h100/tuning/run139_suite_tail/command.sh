#!/bin/bash
# Run 139: the CUDA tests of test_norms.py and test_cuda.py that run 138's
# 400 s did not reach (it ran 895, in collection order), from the 881st on,
# in two processes, against HEAD's library (build_ab/main, sm_90).
set -u
tar xJf build_pack/ab.tar.xz
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FO_TEST_CPU_ONLY_LIBRARY=$PWD/build_ab/cpu/libfused_ops.so
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/main/libfused_ops.so
python3 -m pytest --collect-only -q tests/test_norms.py tests/test_cuda.py -k cuda | grep '::' > $OUT/ids.txt
echo "CUDA tests collected: $(wc -l < $OUT/ids.txt)" | tee $OUT/summary.txt
tail -n +881 $OUT/ids.txt > /tmp/tail.txt
split -n l/2 /tmp/tail.txt /tmp/part_
for p in /tmp/part_aa /tmp/part_ab; do
  mapfile -t ids < $p  # the ids hold spaces
  timeout 500 python3 -m pytest -q -rf --durations=5 "${ids[@]}" > $OUT/pytest_tail_$(basename $p).txt 2>&1 &
done
wait
for p in aa ab; do
  echo "tail part $p ($(wc -l < /tmp/part_$p) ids, first $(head -1 /tmp/part_$p)): $(tail -1 $OUT/pytest_tail_part_$p.txt)" | tee -a $OUT/summary.txt
  grep -E "^FAILED" $OUT/pytest_tail_part_$p.txt | head | tee -a $OUT/summary.txt
done
