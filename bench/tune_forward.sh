#!/usr/bin/env bash
# Forward norm tuning on the GPU machine: builds the library once for each
# FO_FORWARD_TARGET_CHUNKS value (chunks of 8 a thread aims for; 4 is the
# default), then for each: the CUDA norm tests, memcheck on them, and the
# forward benchmark of the fused norms alone. Results go to $OUT/tune_<N>/.
#   bench/tune_forward.sh 4 2 1
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results/local}"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
for n in "$@"; do  # the builds run side by side
    (NVCC_APPEND_FLAGS="-DFO_FORWARD_TARGET_CHUNKS=$n" meson setup "build/tune$n" -Dcuda=enabled \
        -Dgpu_archs=90 -Dgpu_ptx=false >/dev/null && \
     NVCC_APPEND_FLAGS="-DFO_FORWARD_TARGET_CHUNKS=$n" ninja -C "build/tune$n" >/dev/null) &
done
wait
export PYTHONPATH="/tmp/site:$PWD"
for n in "$@"; do
    export FUSED_OPS_PY_LIBRARY="$PWD/build/tune$n/libfused_ops.so"
    mkdir -p "$OUT/tune_$n"
    echo "== target $n chunks: tests"
    python3 -m pytest -q -x tests/test_norms.py -k "cuda and not gradcheck" 2>&1 | tail -1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 99 \
        python3 -m pytest -q -x tests/test_norms.py -k "cuda and not gradcheck and not 2_to_the_31" 2>&1 | \
        grep -E "ERROR SUMMARY|passed|failed" | tr '\n' ' '; echo
    python3 bench/bench_ops.py --out "$OUT/tune_$n" --ops layer_norm,rms_norm,add_rms_norm \
        --directions fwd --providers fused --dtypes bf16,fp32 \
        --shapes 4096x1024,4096x4096,16384x4096,16384x8192,65536x1024,4096x16384 2>&1 | \
        grep -E "^\| " | cut -d'|' -f2-6
done
