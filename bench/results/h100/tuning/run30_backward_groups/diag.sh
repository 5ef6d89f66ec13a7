# Run 30 (b): where the small-shape backward's time goes, on the base build:
# each kernel's device time (torch.profiler), and graph replays after each
# kind of L2 flush (bench/flush_effect.py).
export PYTHONPATH=/tmp/site:$PWD FUSED_OPS_PY_LIBRARY=$PWD/build/tune_base/libfused_ops.so
cd bench
python3 kernel_times.py layer_norm bwd 4096x2048 fused compile fp32
python3 kernel_times.py layer_norm bwd 4096x4096 fused compile liger bf16
python3 flush_effect.py layer_norm bwd 4096x4096 bf16 fused compile liger
python3 flush_effect.py layer_norm bwd 4096x2048 fp32 fused compile
python3 flush_effect.py layer_norm bwd 16384x4096 bf16 fused compile
python3 flush_effect.py layer_norm fwd 4096x4096 bf16 fused compile liger
python3 flush_effect.py relu fwd 4096x4096 bf16 fused eager
