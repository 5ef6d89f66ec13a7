# Run 30 (a): the norm backward's grid and chunks, knobs of norm_registers.cuh
# (tests: the first variant's build), fused alone; bf16 rows are the same
# kernels in every variant but base vs rows32 (their spread is the noise).
TEST_TARGETS=tests/test_norms.py \
BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --providers fused --dtypes bf16,fp32 --shapes 4096x1024,4096x2048,4096x4096,4096x8192,16384x1024,16384x2048,16384x4096,65536x2048" \
bench/tune.sh pf=-DFO_BACKWARD_PREFETCH=1 base= rows16=-DFO_BACKWARD_MIN_ROWS=16 \
    pf_rows32="-DFO_BACKWARD_PREFETCH=1 -DFO_BACKWARD_MIN_ROWS=32" c2=-DFO_BACKWARD_FP32_CHUNKS=2
