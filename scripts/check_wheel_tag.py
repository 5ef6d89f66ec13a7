"""Fail unless each wheel is tagged py3-none-<platform>: the library links no
CPython and no torch, so one wheel must serve every Python; 'any' would claim
a native library runs everywhere, and a cp3XX tag would tie it to one
Python."""

import sys
from pathlib import Path


def main(paths):
    if not paths:
        print("check_wheel_tag: no wheel given")
        return 1
    failures = 0
    for path in map(Path, paths):
        python_tag, abi_tag, platform_tag = path.stem.split("-")[-3:]
        good = python_tag == "py3" and abi_tag == "none" and platform_tag != "any"
        print(f"{'ok' if good else 'WRONG'}: {path.name} is tagged {python_tag}-{abi_tag}-{platform_tag}")
        failures += not good
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
