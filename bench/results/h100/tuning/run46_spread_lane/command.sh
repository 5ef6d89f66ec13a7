# Run 46: kSpread with the lane taken from threadIdx.x and the offset
# written as c * 8 - shift(lane) + immediate(v) (run 45 took c % 32 in 64
# bits per access: the fp32 norm backward and shared-memory forward ran
# 12-20% slower than side by side). spread against side
# (FO_SPREAD_VECTORS=0), fused alone, fp32; and the SASS instruction
# counts of the fp32 norm kernels in both builds.
set -u
export PYTHONUNBUFFERED=1
(TEST_TARGETS="tests/test_norms.py tests/test_bias_scale_relu.py" \
 BENCH_ARGS="--ops layer_norm,rms_norm,relu,bias_scale_relu --directions fwd,bwd --providers fused --dtypes fp32 --shapes 4096x1024,16384x4096,4096x8192,16384x16384" \
 timeout 400 bench/tune.sh spread= side=-DFO_SPREAD_VECTORS=0 ) 2>&1 | grep -E "passed|failed|error|^op dir|fused"
for v in spread side; do
  cuobjdump -sass build/tune_$v/libfused_ops.so | awk -v v=$v '
    /Function :/ {name=$3} /^ +\/\*[0-9a-f]+\*\// {n[name]++}
    END {for (k in n) if (k ~ /norm_(forward|backward)_(registers|shared)_kernelIff/) print v, n[k], k}' | sort -k3 > $OUT/sass_$v.txt
done
paste $OUT/sass_spread.txt $OUT/sass_side.txt | awk '{print $2, $5, $3}' | cut -c1-150
cd $OUT && tar czf run46.tgz tune_* sass_* 2>/dev/null; ls
