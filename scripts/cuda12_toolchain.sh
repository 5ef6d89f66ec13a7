#!/usr/bin/env bash
# Makes a CUDA 12 toolchain (nvcc, headers, the static cudart) available under
# .cache/cuda12/toolkit and prints the path of its nvcc. The second wheel
# variant is built with it, for drivers older than CUDA 13 (R580).
#
# NVIDIA's nvcc for CUDA 12 is not on PyPI (nvidia-cuda-nvcc-cu12 has only
# ptxas), so it comes from Debian's non-free nvidia-cuda-toolkit packages: the
# newest 12.x that trixie, sid or experimental offers, with libcu++ (the C++
# standard library for device code, from main). They are fetched with apt into
# a temporary state directory (the system's apt configuration is left alone)
# and unpacked with dpkg-deb; nothing is installed. A second call reuses the
# cache and needs no network. Needs apt-get, dpkg-deb and a host g++ that
# the toolkit accepts (Debian 12's g++ 12 is).
#
# FUSED_OPS_PY_CUDA12_CACHE moves the cache (default: .cache/cuda12 in the
# repo); FUSED_OPS_PY_CUDA12_MIRROR picks the Debian mirror (it must carry sid
# and experimental, as deb.debian.org does).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${FUSED_OPS_PY_CUDA12_CACHE:-$PWD/.cache/cuda12}"
TOOLKIT="$CACHE/toolkit"
SUITES="trixie sid experimental"
MIRROR="${FUSED_OPS_PY_CUDA12_MIRROR:-http://deb.debian.org/debian}"

if [ -x "$TOOLKIT/bin/nvcc" ] && [ -f "$TOOLKIT/lib64/libcudadevrt.a" ]; then
    echo "$TOOLKIT/bin/nvcc"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
for suite in $SUITES; do
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main non-free"
done >"$work/sources.list"
apt_options=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Architecture=amd64
    -o APT::Sandbox::User=root)

echo "== looking for the newest CUDA 12 in Debian $SUITES" >&2
apt-get "${apt_options[@]}" -qq update >&2

# `apt-cache madison` rows: "name | version | URL suite/non-free amd64 Packages".
newest_version="" newest_suite=""
while IFS='|' read -r _ version origin; do
    version="${version// /}"
    suite="$(awk '{split($2, part, "/"); print part[1]}' <<<"$origin")"
    if [[ "$version" == 12.* ]] &&
        { [ -z "$newest_version" ] || dpkg --compare-versions "$version" gt "$newest_version"; }; then
        newest_version="$version" newest_suite="$suite"
    fi
done < <(apt-cache "${apt_options[@]}" madison nvidia-cuda-toolkit)
if [ -z "$newest_version" ]; then
    echo "cuda12_toolchain.sh: no nvidia-cuda-toolkit 12.x in Debian $SUITES non-free" >&2
    exit 1
fi
echo "== nvidia-cuda-toolkit $newest_version from $newest_suite" >&2

# nvidia-cuda-toolkit: nvcc, cicc, ptxas, nvlink, fatbinary, libdevice.
# nvidia-cuda-dev: the headers, libcudart_static.a and libcudadevrt.a (which
# nvcc links by default) (a 0.9 GB package, since it holds every CUDA
# library; only these are unpacked from it).
# libcu++-dev: cuda/std/*, which cooperative_groups.h includes; it is not
# built per toolkit, so apt's newest serves.
start=$SECONDS
(cd "$work/debs" && apt-get "${apt_options[@]}" -q download \
    "nvidia-cuda-toolkit/$newest_suite" "nvidia-cuda-dev/$newest_suite" libcu++-dev >&2)
echo "== downloaded $(du -sh "$work/debs" | cut -f1) in $((SECONDS - start)) s; unpacking" >&2
root="$work/root"
mkdir -p "$root"
dpkg-deb -x "$work"/debs/nvidia-cuda-toolkit_*.deb "$root"
dpkg-deb -x "$work"/debs/libcu++-dev_*.deb "$root"
dpkg-deb --fsys-tarfile "$work"/debs/nvidia-cuda-dev_*.deb |
    tar -x -C "$root" ./usr/include ./usr/lib/x86_64-linux-gnu/libcudart_static.a \
        ./usr/lib/x86_64-linux-gnu/libcudadevrt.a

# The layout nvcc expects of a CUDA install (bin, nvvm, include, lib64),
# built beside the cache and renamed into place, so an interrupted run leaves
# no half toolkit behind.
partial="$CACHE/toolkit.partial"
rm -rf "$partial"
mkdir -p "$partial"/{bin/crt,nvvm/bin,nvvm/libdevice,lib64}
cp -a "$root"/usr/lib/nvidia-cuda-toolkit/bin/nvcc "$root"/usr/lib/nvidia-cuda-toolkit/bin/crt "$partial/bin/"
for tool in bin2c cu++filt cudafe++ cuobjdump fatbinary nvlink nvprune ptxas; do
    cp -a "$root/usr/bin/$tool" "$partial/bin/"
done
cp -a "$root"/usr/lib/nvidia-cuda-toolkit/bin/cicc "$partial/nvvm/bin/"
cp -a "$root"/usr/lib/nvidia-cuda-toolkit/libdevice/. "$partial/nvvm/libdevice/"
cp -a "$root"/usr/include "$partial/include"
cp -a "$root"/usr/lib/x86_64-linux-gnu/libcudart_static.a \
    "$root"/usr/lib/x86_64-linux-gnu/libcudadevrt.a "$partial/lib64/"
# NVIDIA's own profile, without the target-directory indirection. The host
# compiler is the g++ on PATH (Debian's wrapper scripts that look for a
# g++-13 are left out).
cat >"$partial/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH            += $(CICC_PATH):$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
echo "nvidia-cuda-toolkit $newest_version (Debian $newest_suite), $(basename "$work"/debs/libcu++-dev_*.deb .deb)" >"$partial/version.txt"
rm -rf "$TOOLKIT"
mv "$partial" "$TOOLKIT"
echo "== $("$TOOLKIT/bin/nvcc" --version | tail -2 | head -1); it emits: $("$TOOLKIT/bin/nvcc" --list-gpu-code | tr '\n' ' ')" >&2
echo "$TOOLKIT/bin/nvcc"
