# Run 36: where the 16-bit register backward's warps stall (LayerNorm
# 4096 x 4096 and 16384 x 4096, bf16, and fp32 at 4096 x 4096 beside it):
# ncu's stall reasons per issued instruction, and its source counters.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
S="--clock-control none --section WarpStateStats --section SourceCounters --print-details all --metrics $M --launch-skip 3 --launch-count 1"
cd bench
for case in "4096x4096 bf16" "16384x4096 bf16" "4096x4096 fp32"; do
    set -- $case
    timeout 120 ncu $S -k regex:norm_backward_registers python3 profile_norms.py fused layer_norm bwd $1 $2 > $OUT/ncu_stalls_$1_$2.txt 2>&1
    echo "== $1 $2"; grep -E "issue_stalled_.*ratio" $OUT/ncu_stalls_$1_$2.txt | awk '{print $1, $NF}' | sort -k2 -g -r | head -8
done
