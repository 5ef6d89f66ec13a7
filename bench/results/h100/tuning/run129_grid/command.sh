#!/bin/bash
# Run 129: the grid rows that run 127's change moves (norm bwd and fwdbwd at
# 65536 columns: clusters of 4), fused alone (parts resident_{bf16,fp16,fp32};
# the peers' rows stand); then, every provider again, the rows where one
# fused kernel read 4-14% apart in bf16 and fp16 (the same bytes; parts
# recheck_*): square and SwiGLU fwd 16384 x 65536, relu and bias_scale_relu
# fwd 65536 x 16384, RMSNorm bwd and fwdbwd 16384 and 65536 x 16384.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/final/libfused_ops.so
G=bench/results/h100/tuning/grid_part.sh
for d in bf16 fp16 fp32; do
  PROVIDERS=fused SHAPES=4096x65536,16384x65536 bash $G resident_${d} layer_norm,rms_norm,add_rms_norm bwd,fwdbwd $d 80
done
SHAPES=16384x65536 bash $G recheck_square_swiglu square,swiglu fwd bf16,fp16 120
SHAPES=65536x16384 bash $G recheck_relu relu,bias_scale_relu fwd bf16,fp16 100
SHAPES=16384x16384,65536x16384 bash $G recheck_rms rms_norm bwd,fwdbwd bf16,fp16 150
cd $OUT/w && tar czf $OUT/run129.tgz . && cd $OUT && rm -rf w; ls $OUT
