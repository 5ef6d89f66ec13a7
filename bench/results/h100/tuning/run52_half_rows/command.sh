# Run 52: grid rows that predated the 16-bit backward's shared weight
# (run 42), each provider in a process of its own, rows up to 8192
# columns (the register kernel): fp16 backward (parts/weight_shared_fp16_bwd),
# bf16 and fp16 forward+backward (parts/weight_shared_{bf16,fp16}_fwdbwd).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD
(meson setup build/gpu -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && ninja -C build/gpu) > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
S=4096x512,4096x1024,4096x2048,4096x4096,4096x8192,16384x512,16384x1024,16384x2048,16384x4096,16384x8192,65536x512,65536x1024,65536x2048,65536x4096,65536x8192
mkdir -p $OUT/parts
timeout 190 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions bwd --dtypes fp16 --shapes $S \
    --out $OUT/parts/weight_shared_fp16_bwd > $OUT/weight_shared_fp16_bwd.txt 2>&1; echo "fp16 bwd exit $?"
for d in bf16 fp16; do
  timeout 170 python3 bench/bench_ops.py --isolate --ops layer_norm,rms_norm,add_rms_norm --directions fwdbwd --dtypes $d --shapes $S \
      --out $OUT/parts/weight_shared_${d}_fwdbwd > $OUT/weight_shared_${d}_fwdbwd.txt 2>&1; echo "$d fwdbwd exit $?"
done
cd $OUT && tar czf run52.tgz parts *.txt; ls
