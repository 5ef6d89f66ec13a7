#!/usr/bin/env bash
# Tuning run 29 (eleventh session): SwiGLU's sigmoid by the fast fp32
# intrinsics (FO_FAST_SIGMOID=1, the new default) against the exact form
# (=0): build both, the SwiGLU CUDA tests on the new one, SwiGLU with the
# peers (each provider in its own process) on the new one, fused alone on
# the exact one, the SASS size of each kernel, memcheck on the SwiGLU tests.
# It ran on the tree with fast_sigmoid.diff applied; the variant was dropped.
set -u
SHAPES=4096x512,4096x1024,4096x2048,16384x512,16384x1024,65536x4096
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
setup() { NVCC_APPEND_FLAGS="$2" meson setup "build/$1" -Dcuda=enabled -Dgpu_archs=90 -Dgpu_ptx=false && NVCC_APPEND_FLAGS="$2" ninja -C "build/$1"; }
setup gpu "" > "$OUT/build.txt" 2>&1 &
setup exact "-DFO_FAST_SIGMOID=0" > "$OUT/build_exact.txt" 2>&1 &
wait
for lib in gpu exact; do  # instructions a kernel, by kernel
    cuobjdump -sass "build/$lib/libfused_ops.so" | awk '/Function : .*swiglu/ {name=$3} name && /^ +\/\*[0-9a-f]+\*\// {n[name]++} END {for (k in n) print n[k], k}' | sort -k2 > "$OUT/sass_$lib.txt"
done
export FUSED_OPS_PY_LIBRARY=$PWD/build/gpu/libfused_ops.so
python3 -m pytest -q tests/test_swiglu.py tests/test_cuda.py -k "swiglu and cuda" > "$OUT/pytest_swiglu.txt" 2>&1
tail -1 "$OUT/pytest_swiglu.txt"
python3 bench/bench_ops.py --isolate --ops swiglu --dtypes bf16,fp16,fp32 --shapes $SHAPES --out /tmp/new > "$OUT/bench_new_log.txt" 2>&1
mkdir -p "$OUT/new" && cp /tmp/new/results.csv "$OUT/new/"
FUSED_OPS_PY_LIBRARY=$PWD/build/exact/libfused_ops.so python3 bench/bench_ops.py --providers fused --ops swiglu \
    --dtypes bf16,fp16,fp32 --shapes $SHAPES --out /tmp/exact > /dev/null 2>&1
mkdir -p "$OUT/exact" && cp /tmp/exact/results.csv "$OUT/exact/"
compute-sanitizer --tool memcheck python3 -m pytest -q tests/test_swiglu.py -k cuda > "$OUT/memcheck.txt" 2>&1
tail -3 "$OUT/memcheck.txt"
