# Run 110: the grid's norm backward and forward+backward rows on the
# held partials (build_ab/final, the tree), fused alone: the device time
# left would not hold the peers, whose rows stand from the earlier grid
# (parts held_{bf16,fp16,fp32}_{bwd,fwdbwd}).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
export PROVIDERS=fused
G=bench/results/h100/tuning/grid_part.sh
for d in bf16 fp16 fp32; do for dir in bwd fwdbwd; do bash $G held_${d}_${dir} layer_norm,rms_norm,add_rms_norm $dir $d 90; done; done
cd $OUT/w && tar czf $OUT/run110.tgz . && cd $OUT && rm -rf w; ls $OUT
