# Run 97: the grid rows the partials' stores change, with fused, eager and
# torch.compile (Liger's rows of run 96's grid stand: Liger outlasted the
# part's time limit there): the norms' fp32 backward and relu(x*s+b)'s
# backward in every dtype (parts partials_fp32_bwd, partials_bsr_bwd).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
export FUSED_OPS_PY_LIBRARY=$PWD/build_ab/vecb/libfused_ops.so
export PROVIDERS=fused,eager,compile
G=bench/results/h100/tuning/grid_part.sh
bash $G partials_fp32_bwd layer_norm,rms_norm,add_rms_norm bwd fp32 270
bash $G partials_bsr_bwd bias_scale_relu bwd bf16,fp16,fp32 270
cd $OUT/w && tar czf $OUT/run97.tgz . && cd $OUT && rm -rf w; ls $OUT
