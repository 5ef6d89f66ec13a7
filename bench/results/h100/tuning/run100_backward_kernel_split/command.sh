# Run 100: where the norm backward's time goes now that its partials are
# cheap (bench/kernel_times.py: each kernel's device time, L2 flushed
# before every call): the row kernel against the partials' finishing pass.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
for spec in "layer_norm bwd 4096x1024" "layer_norm bwd 4096x4096" "layer_norm bwd 16384x4096" "rms_norm bwd 4096x4096" \
            "layer_norm bwd 4096x4096 fused fp32" "bias_scale_relu bwd 4096x4096"; do
  set -- $spec
  timeout 60 python3 bench/kernel_times.py $1 $2 $3 fused ${5:-} 2>&1 | tail -6
done | tee $OUT/kernel_times.txt
