"""Loads libfused_ops through cffi in ABI mode and turns its statuses into
Python exceptions. Nothing else lives here.

The cffi declarations are read from the library's own header (shipped in
the package), so they cannot drift from it. The library is looked up at
``$FUSED_OPS_PY_LIBRARY`` (a full path) if set, else in the wheel, which
carries two builds: the default one (CUDA 13) and one with the CUDA 12
runtime, for drivers older than CUDA 13. The driver picks between them.
"""

import os
import re
import sys
from pathlib import Path

import cffi
import torch

ENV_VAR = "FUSED_OPS_PY_LIBRARY"

_PACKAGE_DIR = Path(__file__).resolve().parent
# meson-python installs the libraries at its default libdir into
# site-packages/.<distribution>.mesonpy.libs, beside this package.
_BUNDLED_DIR = _PACKAGE_DIR.parent / ".fused_ops_py.mesonpy.libs"
DEFAULT_LIBRARY = {"darwin": "libfused_ops.dylib", "win32": "fused_ops.dll"}.get(sys.platform, "libfused_ops.so")
CUDA12_LIBRARY = DEFAULT_LIBRARY.replace("fused_ops", "fused_ops_cuda12")
_CUDA_DRIVER = {"win32": "nvcuda.dll"}.get(sys.platform, "libcuda.so.1")


def _header_path() -> Path:
    shipped = _PACKAGE_DIR / "fused_ops.h"
    if shipped.exists():
        return shipped
    return _PACKAGE_DIR.parent / "lib" / "fused_ops.h"  # a source checkout


def cuda_driver_version():
    """The CUDA version the installed driver supports (12040 for 12.4), or
    None when no driver can be loaded. cuDriverGetVersion needs no cuInit,
    so this neither starts CUDA nor touches a GPU."""
    driver_ffi = cffi.FFI()
    driver_ffi.cdef("int cuDriverGetVersion(int *version);")
    try:
        driver = driver_ffi.dlopen(_CUDA_DRIVER)
    except OSError:
        return None
    version = driver_ffi.new("int *")
    if driver.cuDriverGetVersion(version) != 0:
        return None
    return version[0]


def cuda_version_text(version: int) -> str:
    """12040 -> "12.4", as CUDA writes its versions."""
    return f"{version // 1000}.{version % 1000 // 10}"


def choose_variant(driver_version, present):
    """Which bundled build to load, and why: (file name, reason).
    driver_version: what cuda_driver_version() returned; present: the names
    of the bundled files. A build runs only on a driver that supports its
    CUDA major version; the default build is the fallback, since its CPU
    kernels work with any driver or none."""
    if driver_version is None:
        return DEFAULT_LIBRARY, "the default build: no CUDA driver found"
    driver = cuda_version_text(driver_version)
    if driver_version >= 13000:
        return DEFAULT_LIBRARY, f"the default build: the driver supports CUDA {driver}"
    if driver_version >= 12000 and CUDA12_LIBRARY in present:
        return CUDA12_LIBRARY, f"the CUDA 12 build: the driver supports CUDA {driver}, below 13.0"
    missing = "no CUDA 12 build is bundled" if driver_version >= 12000 else "every build needs 12.0+"
    return DEFAULT_LIBRARY, f"the default build, though the driver supports only CUDA {driver}: {missing}"


def _library_choice(driver_version):
    """The library to load and where it came from, in words."""
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        return Path(from_env), f"from ${ENV_VAR}"
    present = {name for name in (DEFAULT_LIBRARY, CUDA12_LIBRARY) if (_BUNDLED_DIR / name).is_file()}
    name, reason = choose_variant(driver_version, present)
    return _BUNDLED_DIR / name, f"bundled in the package, {reason} (${ENV_VAR} is not set)"


def cdef_from_header(header: str) -> str:
    """The declarations between the FO_CDEF_BEGIN and FO_CDEF_END markers,
    without the export macro: what cffi needs, taken from the header itself."""
    begin = header.index("*/", header.index("FO_CDEF_BEGIN")) + 2
    end = header.index("/* FO_CDEF_END */")
    return header[begin:end].replace("FO_API ", "")


def _abi_version_of(header: str) -> int:
    return int(re.search(r"#define FO_ABI_VERSION (\d+)", header).group(1))


def _load(path, origin):
    header = _header_path().read_text()
    ffi = cffi.FFI()
    ffi.cdef(cdef_from_header(header))
    if not path.is_file():
        raise ImportError(
            f"fused_ops_py: library {path} ({origin}) does not exist; "
            f"set ${ENV_VAR} to the full path of a built libfused_ops, or reinstall"
        )
    try:
        lib = ffi.dlopen(str(path))
    except OSError as error:
        raise ImportError(f"fused_ops_py: cannot load {path} ({origin}) as a shared library: {error}") from None
    try:
        found = lib.fo_abi_version()
    except AttributeError:
        raise ImportError(
            f"fused_ops_py: {path} ({origin}) is a shared library but not libfused_ops: it has no fo_abi_version()"
        ) from None
    expected = _abi_version_of(header)
    if found != expected:
        raise ImportError(
            f"fused_ops_py: {path} ({origin}) has ABI version {found}, but this "
            f"package needs ABI version {expected}; point ${ENV_VAR} at a "
            f"matching build or unset it"
        )
    return ffi, lib


driver_version = cuda_driver_version()
library_path, library_origin = _library_choice(driver_version)
ffi, lib = _load(library_path, library_origin)

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
