# Run 53: the shared-memory norm forward in fp32 (rows of 8193 and more,
# where torch.compile leads LayerNorm by 1.14x at 16384 columns). Its y
# stores are evict-first in every type, where the other forward kernels
# mark them in 16-bit only (fp32 ran 10-16% slower with them, run 8).
# base: main; ns: stores plain in fp32 (FO_SHARED_STORE_HINTS=1); sp_ns:
# spread and plain; sp: spread with the hints (run 46's 18% slower case);
# base2: main built again (the noise). Tests on sp_ns (the first), and the
# relu mask-layout test, which had not run on a GPU.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm --directions fwd --providers fused --dtypes fp32 --shapes 4096x16384,16384x16384,4096x32768,4096x65536" \
 timeout 420 bench/tune.sh sp_ns="-DFO_SHARED_FORWARD_SPREAD=1 -DFO_SHARED_STORE_HINTS=1" base= ns=-DFO_SHARED_STORE_HINTS=1 sp=-DFO_SHARED_FORWARD_SPREAD=1 base2= ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
FUSED_OPS_PY_LIBRARY=$PWD/build/tune_base/libfused_ops.so PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m pytest -q tests/test_bias_scale_relu.py -k "mask_byte and cuda" 2>&1 | tail -2 | tee $OUT/mask_layout_test.txt
cd $OUT && tar czf run53.tgz tune_* mask_layout_test.txt 2>/dev/null; ls
