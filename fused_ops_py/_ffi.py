"""Loads libfused_ops through cffi in ABI mode and turns its statuses into
Python exceptions. Nothing else lives here.

The cffi declarations are read from the library's own header (shipped in
the package), so they cannot drift from it. The library is looked up at
``$FUSED_OPS_PY_LIBRARY`` (a full path) if set, else the copy in the wheel.
"""

import os
import re
import sys
from pathlib import Path

import cffi
import torch

ENV_VAR = "FUSED_OPS_PY_LIBRARY"

_PACKAGE_DIR = Path(__file__).resolve().parent
_LIBRARY_FILE = {"darwin": "libfused_ops.dylib", "win32": "fused_ops.dll"}.get(
    sys.platform, "libfused_ops.so"
)


def _header_path() -> Path:
    shipped = _PACKAGE_DIR / "fused_ops.h"
    if shipped.exists():
        return shipped
    return _PACKAGE_DIR.parent / "lib" / "fused_ops.h"  # a source checkout


def _bundled_library_path() -> Path:
    # meson-python installs a shared_library() at its default libdir into
    # site-packages/.<distribution>.mesonpy.libs, beside this package.
    return _PACKAGE_DIR.parent / ".fused_ops_py.mesonpy.libs" / _LIBRARY_FILE


def cdef_from_header(header: str) -> str:
    """The declarations between the FO_CDEF_BEGIN and FO_CDEF_END markers,
    without the export macro: what cffi needs, taken from the header itself."""
    begin = header.index("*/", header.index("FO_CDEF_BEGIN")) + 2
    end = header.index("/* FO_CDEF_END */")
    return header[begin:end].replace("FO_API ", "")


def _abi_version_of(header: str) -> int:
    return int(re.search(r"#define FO_ABI_VERSION (\d+)", header).group(1))


def _load():
    header = _header_path().read_text()
    ffi = cffi.FFI()
    ffi.cdef(cdef_from_header(header))
    from_env = os.environ.get(ENV_VAR)
    path = Path(from_env) if from_env else _bundled_library_path()
    origin = (
        f"from ${ENV_VAR}" if from_env else f"bundled in the package (${ENV_VAR} is not set)"
    )
    if not path.is_file():
        raise ImportError(
            f"fused_ops_py: library {path} ({origin}) does not exist; "
            f"set ${ENV_VAR} to the full path of a built libfused_ops, or reinstall"
        )
    try:
        lib = ffi.dlopen(str(path))
    except OSError as error:
        raise ImportError(
            f"fused_ops_py: cannot load {path} ({origin}) as a shared library: {error}"
        ) from None
    try:
        found = lib.fo_abi_version()
    except AttributeError:
        raise ImportError(
            f"fused_ops_py: {path} ({origin}) is a shared library but not "
            f"libfused_ops: it has no fo_abi_version()"
        ) from None
    expected = _abi_version_of(header)
    if found != expected:
        raise ImportError(
            f"fused_ops_py: {path} ({origin}) has ABI version {found}, but this "
            f"package needs ABI version {expected}; point ${ENV_VAR} at a "
            f"matching build or unset it"
        )
    return ffi, lib, path


ffi, lib, library_path = _load()

_EXCEPTIONS = {
    lib.FO_ERR_INVALID_ARGUMENT: ValueError,
    lib.FO_ERR_UNSUPPORTED_DTYPE: TypeError,
    lib.FO_ERR_UNSUPPORTED_DEVICE: ValueError,
}


# FUSED_OPS_PY_SYNC=1: synchronize after every launch, so that an
# asynchronous CUDA fault is reported by the op that caused it (slow: debug only).
SYNC = os.environ.get("FUSED_OPS_PY_SYNC", "0") not in ("", "0")


def finish(function, status, device) -> None:
    """What follows a call of `function` (an entry point) that returned a
    non-zero status, or any call under FUSED_OPS_PY_SYNC=1: raise the
    status's exception, else synchronize the GPU (device: the call's
    device_type and device_index) and name the op if its kernels faulted.
    The calls spell out ``if status or SYNC: finish(...)``, so the common
    case costs one test."""
    check(status)
    if SYNC and device[0] == lib.FO_DEVICE_CUDA:
        try:
            torch.cuda.synchronize(device[1])
        except Exception as error:  # torch >= 2.8 raises torch.AcceleratorError
            raise RuntimeError(
                f"{entry_point_name(function)}: the kernels it launched on cuda:{device[1]} failed "
                f"(found by FUSED_OPS_PY_SYNC=1): {error}"
            ) from None


def entry_point_name(function) -> str:
    """The name of one of lib's functions: cffi's function objects have no
    __name__ of their own, but lib hands out the same object for a name."""
    return next((name for name in dir(lib) if getattr(lib, name) is function), repr(function))


def check(status: int) -> None:
    """Raise the exception a non-zero status stands for, with the library's
    message (it names the op and the offending values)."""
    if status != lib.FO_OK:
        kind = _EXCEPTIONS.get(status, RuntimeError)
        name = ffi.string(lib.fo_status_string(status)).decode()
        message = ffi.string(lib.fo_last_error()).decode()
        raise kind(f"{message} [{name}]")
