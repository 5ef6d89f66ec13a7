"""Fail unless each wheel is tagged py3-none-manylinux_X_Y_<arch>.

py3-none: the library links no CPython and no torch, so one wheel must serve
every Python; a cp3XX tag would tie it to one Python.

manylinux_X_Y_<arch> (PEP 600): the wheel runs on any Linux whose glibc is
X.Y or newer. PyPI refuses a plain linux_<arch> wheel, and 'any' would claim
a native library runs everywhere. The legacy aliases (manylinux2014_x86_64 ...)
are accepted beside a PEP 600 tag, as auditwheel writes them.

Usage: check_wheel_tag.py [--max-glibc X.Y] WHEEL...
--max-glibc also fails a wheel whose tag asks for a glibc newer than X.Y
(scripts/build_wheel.sh passes the sysroot's glibc).
"""

import re
import sys
from pathlib import Path

PEP600 = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64|ppc64le|s390x|i686|armv7l)")
LEGACY = re.compile(r"manylinux(1|2010|2014)_(x86_64|aarch64|ppc64le|s390x|i686)")


def glibc_floor(platform_tags):
    """The glibc (major, minor) the PEP 600 tags ask for, None if a tag is
    neither PEP 600 nor a legacy manylinux alias, or if none is PEP 600."""
    versions = []
    for tag in platform_tags:
        match = PEP600.fullmatch(tag)
        if match:
            versions.append((int(match.group(1)), int(match.group(2))))
        elif not LEGACY.fullmatch(tag):
            return None
    return min(versions) if versions else None


def main(args):
    max_glibc = None
    if args[:1] == ["--max-glibc"]:
        max_glibc = tuple(int(part) for part in args[1].split("."))
        args = args[2:]
    if not args:
        print("check_wheel_tag: no wheel given")
        return 1
    failures = 0
    for path in map(Path, args):
        python_tag, abi_tag, platform_tag = path.stem.split("-")[-3:]
        floor = glibc_floor(platform_tag.split("."))
        good = python_tag == "py3" and abi_tag == "none" and floor is not None
        why = ""
        if good and max_glibc is not None and floor > max_glibc:
            good = False
            why = f" (glibc {floor[0]}.{floor[1]} > {max_glibc[0]}.{max_glibc[1]})"
        elif not good:
            why = " (want py3-none-manylinux_X_Y_<arch>)"
        print(f"{'ok' if good else 'WRONG'}: {path.name} is tagged {python_tag}-{abi_tag}-{platform_tag}{why}")
        failures += not good
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
