#!/bin/bash
# Run 120: which test failed in run 119 (nopf: 1 failed of 79), and whether
# it repeats: nopf and deferred on the same tests, failures reported.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
for v in nopf deferred; do
  FUSED_OPS_PY_LIBRARY=$PWD/build_ab/$v/libfused_ops.so timeout 120 python3 -m pytest -q -rf tests/test_norms.py -k "cuda and (parked_in_dx or allocates)" > $OUT/pytest_$v.txt 2>&1
  echo "$v: $(tail -1 $OUT/pytest_$v.txt)"; grep -E "^FAILED|Error|assert" $OUT/pytest_$v.txt | head -20
done
