# Run 51: the final tree (kSpread in the fp32 elementwise ops and register
# norms): the whole pytest suite on the H100, and the ptxas spill report.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
(NVCC_APPEND_FLAGS="-Xptxas -v" meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && NVCC_APPEND_FLAGS="-Xptxas -v" ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "ptxas: $(grep -c 'Compiling entry' $OUT/build.txt) kernels, $(grep -E 'spill' $OUT/build.txt | grep -vc ' 0 bytes spill stores, 0 bytes spill loads') with spills"
grep -E "spill|Compiling entry" $OUT/build.txt > $OUT/ptxas.txt; rm $OUT/build.txt
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
timeout 480 python3 -m pytest -q -rs -p no:cacheprovider tests > $OUT/pytest.txt 2>&1; echo "pytest exit $?: $(tail -1 $OUT/pytest.txt)"
ls $OUT
