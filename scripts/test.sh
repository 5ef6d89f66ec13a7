#!/usr/bin/env bash
# Every test: the C tests of a CPU-only build and (with nvcc) of a CUDA build,
# the wheel and its tag, then pytest against the installed wheel and again
# against the CPU-only library swapped in with $FUSED_OPS_PY_LIBRARY.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh

echo "== C tests, CPU-only build"
meson setup build/cpu -Dcuda=disabled --wipe >/dev/null 2>&1 || meson setup build/cpu -Dcuda=disabled >/dev/null
ninja -C build/cpu
meson test -C build/cpu --print-errorlogs

if command -v nvcc >/dev/null; then
    echo "== C tests, CUDA build (the CUDA paths must fail cleanly without a GPU)"
    meson setup build/cuda -Dcuda=enabled --wipe >/dev/null 2>&1 || meson setup build/cuda -Dcuda=enabled >/dev/null
    ninja -C build/cuda
    meson test -C build/cuda --print-errorlogs
fi

echo "== wheel"
rm -rf dist
python -m pip wheel -q --no-deps -w dist .
python scripts/check_wheel_tag.py dist/fused_ops_py-*.whl
python -m pip install -q --no-deps --force-reinstall dist/fused_ops_py-*.whl

echo "== pytest, installed wheel"
pytest -q tests
echo "== pytest, CPU-only library via FUSED_OPS_PY_LIBRARY"
FUSED_OPS_PY_LIBRARY="$PWD/build/cpu/libfused_ops.so" pytest -q tests
