# isolated/: one process a provider, joined by combine.py (bench_ops.py --isolate does the same)
for p in liger fused eager compile; do python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwd --dtypes bf16 --shapes 4096x1024,4096x2048,4096x4096,16384x2048 --providers $p --out $OUT/iso_$p; done
python3 bench/combine.py isolated iso_fused iso_eager iso_compile iso_liger
# in_one_process/: every provider in one process, as the committed results were taken
python3 bench/bench_ops.py --ops layer_norm,rms_norm --directions fwd --dtypes bf16,fp16 --shapes 4096x1024,4096x2048,4096x4096,4096x8192,16384x2048,16384x4096 --out $OUT/recheck
