#!/usr/bin/env bash
# Builds libfused_ops against the CUDA 12 runtime, with the toolchain of
# scripts/cuda12_toolchain.sh, and prints the library's path: the wheel ships
# it beside the default (CUDA 13) build for drivers older than CUDA 13:
#
#   lib="$(scripts/build_cuda12_library.sh build/cuda12)"
#   python -m pip wheel . -Csetup-args=-Dcuda12_library="$lib"
#
# Usage: scripts/build_cuda12_library.sh OUTDIR [extra meson setup args...]
# Needs meson and ninja on PATH (scripts/setup_env.sh puts them there).
# Everything but the printed path goes to stderr.
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [extra meson setup args...]" >&2
    exit 2
fi
outdir="$(realpath -m "$1")"
shift
cd "$(dirname "$0")/.."

nvcc="$(scripts/cuda12_toolchain.sh)"
# Meson takes nvcc from PATH (it reads no NVCC variable); the toolkit's own
# bin directory first also keeps the system's CUDA 13 nvcc out.
export PATH="$(dirname "$nvcc"):$PATH"
# An existing build directory is reconfigured, so a second run rebuilds only
# what changed.
if [ -f "$outdir/meson-private/coredata.dat" ]; then
    meson setup --reconfigure "$outdir" -Dcuda=enabled "$@" >&2
else
    meson setup "$outdir" -Dcuda=enabled "$@" >&2
fi
ninja -C "$outdir" libfused_ops.so >&2
echo "$outdir/libfused_ops.so"
