#!/usr/bin/env bash
# Everything the GPU machine must show, in one go (see ../shared/GPU.md):
#   bench/gpu_check.sh test    build with Meson, CUDA pytest suite,
#                              compute-sanitizer, SASS and register report
#   bench/gpu_check.sh bench [bench_ops.py flags]
#                              build, then the benchmark against the peers,
#                              its plots, and the host time a call
#   bench/gpu_check.sh multi   build, then the 2-GPU tests (DDP, FSDP2)
#   bench/gpu_check.sh fp8 [tests,casts,step,convergence]
#                              build, then the FP8 tests (CUDA against CPU,
#                              _scaled_mm against its emulation), the casts
#                              against torchao's math, the Llama step's FP8 rows
#                              (VOCABS, default 32000; PROVIDERS) and the convergence runs
#                              (RUNS, added to OUT's CSV); all four exceed one
#                              call: pick parts
#   bench/gpu_check.sh patch   build, then patch(model)'s tests and sweep over
#                              every *ForCausalLM class on the GPU (whenever
#                              patching changes), RoPE's and the clamped
#                              SwiGLU's tests and sanitizers
# GPU_LIBRARY: a library built beforehand, used instead of building one.
# For a shorter test stage: PYTEST_TARGETS (default tests) and SANITIZERS
# (default "memcheck racecheck initcheck synccheck").
# Wheels the machine lacks (cffi, pycparser) come in .whl/ (carried).
# Logs and data go to $OUT (default bench/results/local); a table prints last.
set -uo pipefail
cd "$(dirname "$0")/.."
stage="${1:-test}"
OUT="${OUT:-bench/results/local}"
mkdir -p "$OUT" /tmp/logs
export PYTHONUNBUFFERED=1

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
    export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee /tmp/logs/gpu.txt

# build the library from source with Meson and use it through the variable
if [ -n "${GPU_LIBRARY:-}" ]; then
    export FUSED_OPS_PY_LIBRARY="$GPU_LIBRARY"
else
    if [ ! -f build/gpu/build.ninja ]; then
        meson setup build/gpu -Dcuda=enabled -Dgpu_archs=80,90 >/tmp/logs/meson.txt 2>&1 || { cat /tmp/logs/meson.txt; exit 1; }
    fi
    ninja -C build/gpu >>/tmp/logs/meson.txt 2>&1 || { cat /tmp/logs/meson.txt; exit 1; }
    export FUSED_OPS_PY_LIBRARY="$PWD/build/gpu/libfused_ops.so"
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
python3 -m fused_ops_py | tee /tmp/logs/env.txt

if [ "$stage" = test ]; then
    # a library for another GPU only (sm_80, no PTX): the error must say so
    if [ ! -f build/gpu80/build.ninja ]; then
        meson setup build/gpu80 -Dcuda=enabled -Dgpu_archs=80 -Dgpu_ptx=false >>/tmp/logs/meson.txt 2>&1
    fi
    ninja -C build/gpu80 >>/tmp/logs/meson.txt 2>&1 && export FO_TEST_OTHER_ARCH_LIBRARY="$PWD/build/gpu80/libfused_ops.so"
    # a CPU-only build, for the library-swap tests
    [ -f build/gpucpu/build.ninja ] || meson setup build/gpucpu -Dcuda=disabled >>/tmp/logs/meson.txt 2>&1
    ninja -C build/gpucpu >>/tmp/logs/meson.txt 2>&1 && export FO_TEST_CPU_ONLY_LIBRARY="$PWD/build/gpucpu/libfused_ops.so"
    echo "== pytest (CPU and CUDA)"
    python3 -m pytest -q -rs ${PYTEST_TARGETS:-tests} 2>&1 | tee /tmp/logs/pytest.txt | tail -15
    pytest_status=${PIPESTATUS[0]}

    # sanitizers see torch's caching allocator as one big buffer; turn it off
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    subset=(tests/test_cuda.py tests/test_norms.py)  # and each op's tests/test_<op>.py
    for op in fused_ops_py/ops/*.py; do
        [ -f "tests/test_$(basename "$op")" ] && subset+=("tests/test_$(basename "$op")")
    done
    filter="cuda and not gradcheck and not 2_to_the_31"
    for tool in ${SANITIZERS:-memcheck racecheck initcheck synccheck}; do
        echo "== compute-sanitizer --tool $tool"
        compute-sanitizer --tool "$tool" --error-exitcode 99 python3 -m pytest -q -x "${subset[@]}" -k "$filter" \
            >"/tmp/logs/sanitizer_$tool.txt" 2>&1
        echo "$tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' "/tmp/logs/sanitizer_$tool.txt" | tr '\n' ' ')"
        # torch's own kernels (the tests' references) get reports too: count
        # the report lines that name a kernel of this library and torch's
        echo "  lines naming fused_ops kernels (fo::): $(grep -c 'fo::' "/tmp/logs/sanitizer_$tool.txt"), torch kernels (at::native): $(grep -c 'at::native' "/tmp/logs/sanitizer_$tool.txt")"
    done | tee /tmp/logs/sanitizer_summary.txt

    echo "== SASS: 128-bit global loads/stores and local memory per kernel"
    cuobjdump --dump-sass build/gpu/libfused_ops.so >/tmp/logs/sass.txt 2>&1
    python3 - <<'PY' | tee /tmp/logs/sass_summary.txt
import re
kernel, rows = None, {}
for line in open("/tmp/logs/sass.txt"):
    m = re.search(r"Function : (\S+)", line)
    if m: kernel = m.group(1); rows[kernel] = [0, 0, 0]
    elif kernel:
        rows[kernel][0] += bool(re.search(r"LDG\.E[\w.]*\.128", line))
        rows[kernel][1] += bool(re.search(r"STG\.E[\w.]*\.128", line))
        rows[kernel][2] += bool(re.search(r"\b(LDL|STL)\b", line))
print(f"{'kernel (sm_90 and sm_80 copies)':<90} ldg128 stg128 local")
for k, (l, s, loc) in rows.items(): print(f"{k[:90]:<90} {l:>6} {s:>6} {loc:>5}")
PY
    for f in lib/cuda/*.cu; do
        nvcc -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -Xptxas -v -c "$f" -o /dev/null 2>&1 | grep -E "registers|spill" ; done >/tmp/logs/ptxas.txt
    echo "ptxas: $(grep -c 'spill stores' /tmp/logs/ptxas.txt) kernels, $(grep -E '[1-9][0-9]* bytes spill' -c /tmp/logs/ptxas.txt) with spills"
    tar -czf "$OUT/gpu_test_logs.tar.gz" --exclude=sass.txt -C /tmp logs  # sass.txt: tens of MB
    echo "== verdict: pytest exit $pytest_status"
    cat /tmp/logs/sanitizer_summary.txt
    tail -1 /tmp/logs/pytest.txt
    exit "$pytest_status"
fi

if [ "$stage" = bench ]; then
    python3 bench/bench_ops.py --out "$OUT" "${@:2}" 2>&1 | tee /tmp/logs/bench.txt | tail -60
    status=${PIPESTATUS[0]}
    python3 bench/plot.py "$OUT" 2>&1 | tail -1  # when the machine has matplotlib
    python3 bench/bench_overhead.py --out "$OUT" 2>&1 | tail -20  # host time a call
    tar -czf "$OUT/gpu_bench_logs.tar.gz" --exclude=sass.txt -C /tmp logs
    exit "$status"
fi
if [ "$stage" = multi ]; then
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    python3 -m pytest -q -rs -s tests/test_distributed.py tests/test_cuda.py tests/test_compile.py tests/test_patching.py 2>&1 | tee /tmp/logs/multi.txt | tail -30
    status=${PIPESTATUS[0]}
    tar -czf "$OUT/gpu_multi_logs.tar.gz" --exclude=sass.txt -C /tmp logs
    exit "$status"
fi
if [ "$stage" = fp8 ]; then
    # each part fits one device call: tests + casts (~3 min), step (~6 min a vocab), convergence (~3 min a run)
    parts="${2:-tests,casts,step,convergence}"
    status=0
    if [[ ",$parts," == *,tests,* ]]; then
        python3 -m pytest -q -rs tests/test_quantize_fp8.py tests/test_float8_linear.py tests/test_patch_fp8.py 2>&1 |
            tee /tmp/logs/fp8_tests.txt | tail -5
        status=${PIPESTATUS[0]}
    fi
    [[ ",$parts," == *,casts,* ]] && python3 bench/bench_fp8.py --out "$OUT" 2>&1 | tail -3
    [[ ",$parts," == *,step,* ]] && python3 bench/bench_train_step.py --vocabs "${VOCABS:-32000}" --no-decode \
        --breakdown --out "$OUT" --providers \
        "${PROVIDERS:-patch_fp8,torchao_fp8_compile,liger,patch_fp8_compile,patch_fp8_rowwise,torchao_fp8_rowwise_compile,torchao_fp8,patch}" \
        2>&1 | tee /tmp/logs/fp8_step.txt | grep "vocab="
    [[ ",$parts," == *,convergence,* ]] && python3 bench/fp8_convergence.py --runs "${RUNS:-bf16,fp8,torchao_fp8}" \
        --append --out "$OUT" 2>&1 | tee /tmp/logs/fp8_convergence.txt | tail -5
    tar -czf "$OUT/gpu_fp8_logs.tar.gz" -C /tmp logs
    exit "$status"
fi
if [ "$stage" = patch ]; then
    python3 -m pytest -q -rs tests/test_patching.py tests/test_patch_sweep.py tests/test_rope.py tests/test_clamped_swiglu.py 2>&1 | tee /tmp/logs/patch.txt | tail -15
    status=${PIPESTATUS[0]}
    export PYTORCH_NO_CUDA_MEMORY_CACHING=1
    for tool in memcheck racecheck initcheck synccheck; do
        compute-sanitizer --tool "$tool" --error-exitcode 99 python3 -m pytest -q -x tests/test_rope.py \
            tests/test_clamped_swiglu.py -k "cuda and not gradcheck" >"/tmp/logs/sanitizer_patch_$tool.txt" 2>&1
        echo "rope, clamped swiglu $tool exit=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' "/tmp/logs/sanitizer_patch_$tool.txt" | tr '\n' ' ')"
    done | tee /tmp/logs/sanitizer_summary.txt
    tar -czf "$OUT/gpu_patch_logs.tar.gz" -C /tmp logs
    exit "$status"
fi
echo "unknown stage $stage (test, bench, multi, fp8 or patch)"; exit 2
