#!/usr/bin/env bash
# Makes a sysroot of Debian bullseye's glibc 2.31 under .cache/sysroot-bullseye
# and prints its path. scripts/build_wheel.sh compiles and links the library
# against it, so the symbols it takes from glibc (pthread_*, dl*, sem_*,
# shm_open: lib/cpu_parallel.c and the static cudart) bind to their 2.31-or-
# older versions, and the wheel is manylinux_2_31 rather than the
# manylinux_2_34 that Debian 12's glibc 2.36 gives (glibc 2.34 moved those
# functions into libc.so.6 under new symbol versions).
#
# The packages are fetched with apt into a temporary state directory (the
# system's apt configuration is left alone, nothing is installed) and unpacked
# with dpkg -x. A second call reuses the cache and needs no network.
# FUSED_OPS_PY_SYSROOT_CACHE moves the cache; FUSED_OPS_PY_DEBIAN_MIRROR picks
# the mirror (http://archive.debian.org/debian once bullseye leaves
# deb.debian.org).
set -euo pipefail
cd "$(dirname "$0")/.."
SYSROOT="${FUSED_OPS_PY_SYSROOT_CACHE:-$PWD/.cache/sysroot-bullseye}"
MIRROR="${FUSED_OPS_PY_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# libc6-dev: headers, crt*.o, the libc.so/libm.so linker scripts; linux-libc-dev:
# the kernel headers glibc's include; libgcc-s1: the libgcc_s.so.1 that gcc's
# libgcc_s.so linker script names; libstdc++6: gcc 10's libstdc++ (nvcc links
# with g++, and gcc 12's own libstdc++.so needs glibc 2.36, which fails the
# link of the C tests' executables).
PACKAGES="libc6 libc6-dev linux-libc-dev libgcc-s1 libstdc++6"

if [ "$(cat "$SYSROOT/.packages" 2>/dev/null)" = "$PACKAGES" ]; then
    echo "$SYSROOT"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
touch "$work/status"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR bullseye main" \
    >"$work/sources.list"
# An empty dpkg status: apt would otherwise offer the installed (bookworm)
# versions, which bullseye's index does not have.
apt_options=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/lists" -o "Dir::State::status=$work/status"
    -o "Dir::Cache=$work/cache" -o APT::Architecture=amd64 -o APT::Sandbox::User=root)

echo "== fetching a Debian bullseye sysroot (glibc 2.31) from $MIRROR" >&2
apt-get "${apt_options[@]}" -qq update >&2
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get "${apt_options[@]}" -qq download $PACKAGES >&2)

partial="$SYSROOT.partial"
rm -rf "$partial"
mkdir -p "$partial"
for deb in "$work"/debs/*.deb; do
    dpkg -x "$deb" "$partial"
done
# Absolute symlinks (libpthread.so -> /lib/x86_64-linux-gnu/libpthread.so.0)
# would lead the linker out of the sysroot to the host's glibc: made relative.
find "$partial" -type l -lname '/*' | while read -r link; do
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$partial$(readlink "$link")")" "$link"
done
# libstdc++6 has no libstdc++.so for the linker's -lstdc++ (that is in
# libstdc++-10-dev, with the headers of gcc 10, which are not wanted).
ln -sfn libstdc++.so.6 "$partial/usr/lib/x86_64-linux-gnu/libstdc++.so"
echo "$PACKAGES" >"$partial/.packages"
rm -rf "$SYSROOT"
mv "$partial" "$SYSROOT"
echo "$SYSROOT"
