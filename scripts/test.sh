#!/usr/bin/env bash
# Every test: lint and format (ruff, clang-format), the C tests of a CPU-only build, the same under ASan + UBSan, a
# fixed-seed fuzz of the C API, the release wheel and sdist (scripts/
# build_wheel.sh: manylinux tag, twine check), the C tests of the wheel's
# build (CUDA with nvcc), a wheel built from the sdist, pytest against the
# installed wheel, the CPU-only library swapped in with $FUSED_OPS_PY_LIBRARY
# (its loading and errors, and its CPU kernels on each other instruction
# set), the same wheel on the oldest torch tested (CPython 3.9) and on
# CPython 3.13.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh

echo "== lint and format: ruff (pyproject.toml) and clang-format (.clang-format, lib/); a diff fails"
# pinned: another ruff release may format differently
python -m pip install -q ruff==0.17.6
ruff check .
ruff format --check .
if ! command -v clang-format >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "-- installing clang-format (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-format >/dev/null
fi
if command -v clang-format >/dev/null; then
    clang-format --dry-run --Werror $(git ls-files 'lib/*.c' 'lib/*.h' 'lib/*.cu' 'lib/*.cuh')
else
    echo "-- SKIPPED: clang-format is not available and cannot be installed here (not root, or no apt-get)"
fi

echo "== C tests, CPU-only build"
meson setup build/cpu -Dcuda=disabled --wipe >/dev/null 2>&1 || meson setup build/cpu -Dcuda=disabled >/dev/null
ninja -C build/cpu
meson test -C build/cpu --print-errorlogs

echo "== C tests under AddressSanitizer + UndefinedBehaviorSanitizer (CPU-only build)"
# Meson's b_sanitize instruments the library and the tests alike.
# -fno-sanitize-recover=all makes a UBSan report abort the test (by default it
# prints and goes on, and the test would pass); b_lundef=false because a
# sanitized shared library leaves the runtime's symbols to the executable
# (clang does not link it into shared libraries). debugoptimized: -O2 -g,
# for readable stacks. The Python tests do not run under ASan.
meson setup build/asan -Dcuda=disabled -Dbuildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all \
    --wipe >/dev/null 2>&1 ||
    meson setup build/asan -Dcuda=disabled -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false -Dc_args=-fno-sanitize-recover=all >/dev/null
ninja -C build/asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    meson test -C build/asan --print-errorlogs

echo "== fuzzing the C API (40000 runs, fixed seed: half on the baseline kernels, half vectorized)" \
    "(tests/fuzz/run.sh: clang, libFuzzer, ASan, UBSan)"
# Whether clang can build a libFuzzer target (clang plus its runtime library).
fuzzer_clang_works() {
    local dir
    dir="$(mktemp -d)"
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
        >"$dir/t.c"
    clang -fsanitize=fuzzer,address,undefined "$dir/t.c" -o "$dir/t" >/dev/null 2>&1
    local status=$?
    rm -rf "$dir"
    return $status
}
if ! fuzzer_clang_works; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "-- installing clang and its runtime libraries (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
        # libFuzzer and the sanitizer runtimes: libclang-rt-N-dev for clang N
        # (only a Recommends of clang, so not always installed with it)
        clang_major="$(clang -dumpversion | cut -d. -f1)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "libclang-rt-$clang_major-dev" >/dev/null
    fi
fi
if fuzzer_clang_works; then
    FUZZ_SEED=20261122 FUZZ_RUNS=20000 tests/fuzz/run.sh
    # the float kernels as most machines run them: AVX-512 where this CPU has it, else AVX2
    vector_isa=""
    grep -qw avx2 /proc/cpuinfo 2>/dev/null && vector_isa=avx2
    grep -qw avx512f /proc/cpuinfo 2>/dev/null && vector_isa=avx512
    if [ -n "$vector_isa" ]; then
        FUZZ_ISA="$vector_isa" FUZZ_SEED=20261122 FUZZ_RUNS=20000 tests/fuzz/run.sh
    fi
else
    echo "-- SKIPPED: clang with -fsanitize=fuzzer is not available and cannot be installed" \
        "here (not root, or no apt-get); install clang and libclang-rt-N-dev to fuzz"
fi

echo "== wheel and sdist (scripts/build_wheel.sh: the release build, its tag, twine check)"
scripts/build_wheel.sh
python -m pip install -q --no-deps --force-reinstall dist/fused_ops_py-*.whl

# The wheel's build directory is the CUDA build when there is nvcc: its C
# tests run there rather than in a third CUDA build.
echo "== C tests of the wheel's build (build/rel-wheel; the CUDA paths must fail cleanly without a GPU)"
"${FUSED_OPS_PY_BUILD_VENV:-$PWD/.venv-build}/bin/meson" test -C build/rel-wheel --print-errorlogs

echo "== a wheel built from the sdist (scripts/test_sdist.sh)"
scripts/test_sdist.sh

# the library-swap tests load this CPU-only build in a subprocess
export FO_TEST_CPU_ONLY_LIBRARY="$PWD/build/cpu/libfused_ops.so"
echo "== pytest, installed wheel"
pytest -q tests

# The CPU-only build, swapped in with $FUSED_OPS_PY_LIBRARY: the tests of
# loading and calling a library, then the CPU kernels' tests on the other
# instruction sets it carries (FUSED_OPS_PY_CPU_ISA; the wheel's run above
# took the best this CPU runs), so every path of each build runs once.
# Each op's tests are tests/test_<op>.py, beside fused_ops_py/ops/<op>.py.
echo "== pytest, CPU-only library via FUSED_OPS_PY_LIBRARY: loading, errors, argument checks"
FUSED_OPS_PY_LIBRARY="$FO_TEST_CPU_ONLY_LIBRARY" pytest -q tests/test_ffi.py tests/test_errors.py \
    tests/test_checks.py tests/test_robustness.py
cpu_kernel_tests=(tests/test_norms.py tests/test_variants.py tests/test_cpu_threads.py tests/test_gate_fp8.py)
for op in fused_ops_py/ops/*.py; do
    [ -f "tests/test_$(basename "$op")" ] && cpu_kernel_tests+=("tests/test_$(basename "$op")")
done
for isa in avx2 baseline; do
    echo "== pytest, the CPU kernels' tests on the CPU-only library's $isa kernels (FUSED_OPS_PY_CPU_ISA=$isa)"
    FUSED_OPS_PY_LIBRARY="$FO_TEST_CPU_ONLY_LIBRARY" FUSED_OPS_PY_CPU_ISA=$isa \
        pytest -q "${cpu_kernel_tests[@]}" -k "not cuda"
done

echo "== the same wheel on the oldest torch tested, CPython 3.9 (scripts/test_old_torch.sh)"
scripts/test_old_torch.sh
echo "== the same wheel on CPython 3.13 (scripts/test_new_python.sh)"
scripts/test_new_python.sh
