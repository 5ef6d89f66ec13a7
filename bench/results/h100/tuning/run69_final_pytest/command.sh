# Run 69: the whole pytest suite on the tree's library (built for sm_90,
# carried in build_ab/new); run 68's was cut by its 340-s limit at 87%.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
FUSED_OPS_PY_LIBRARY=$PWD/build_ab/new/libfused_ops.so timeout 570 python3 -m pytest -q -p no:cacheprovider -rfE tests > $OUT/pytest_all_full.txt 2>&1
echo "exit $?"; tail -4 $OUT/pytest_all_full.txt; grep -c F $OUT/pytest_all_full.txt
