# Run 35 (branch next/lean-dx): the register backward's dx pass as
# rstd * wdy + (h - mean) * c_h + c_0 (4 operations an element, not 6)
# against main, twice (base, base2: the same code built twice, the noise).
TEST_TARGETS=tests/test_norms.py \
BENCH_ARGS="--ops layer_norm,rms_norm,add_rms_norm --directions bwd --providers fused --dtypes bf16,fp32 --shapes 4096x1024,4096x2048,4096x4096,4096x8192,16384x1024,16384x4096,16384x8192,65536x2048" \
bench/tune.sh lean=-DFO_BACKWARD_LEAN_DX=1 base= base2=-DFO_UNUSED_TAG=1
