# Run 99: the forward+backward rows the partials' stores change, fused
# alone (the device time left would not hold the peers; their rows stand
# from the earlier grid, measured on this machine type): the norms in
# every dtype and relu(x*s+b) (parts partials_*_fwdbwd).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
export PROVIDERS=fused
G=bench/results/h100/tuning/grid_part.sh
for d in bf16 fp16 fp32; do bash $G partials_${d}_fwdbwd layer_norm,rms_norm,add_rms_norm fwdbwd $d 150; done
bash $G partials_bsr_fwdbwd bias_scale_relu fwdbwd bf16,fp16,fp32 90
cd $OUT/w && tar czf $OUT/run99.tgz . && cd $OUT && rm -rf w; ls $OUT
