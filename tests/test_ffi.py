"""The binding: where the library comes from, that cffi's declarations are
the header's, versions, and $FUSED_OPS_PY_LIBRARY good and bad."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fused_ops_py
from fused_ops_py import _ffi

REPO_HEADER = Path(__file__).resolve().parent.parent / "lib" / "fused_ops.h"


def import_with_library(path, cwd):
    """Import fused_ops_py in a fresh interpreter with $FUSED_OPS_PY_LIBRARY
    set; returns the completed process."""
    env = dict(os.environ, FUSED_OPS_PY_LIBRARY=str(path))
    code = (
        "import fused_ops_py\n"
        "print(fused_ops_py.library_path())\n"
        "print([l.split()[-1] for l in open('/proc/self/maps') if 'fused_ops' in l][0])\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)


def build_shared_library(source, tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a stand-in library")
    c_file = tmp_path / "standin.c"
    c_file.write_text(source)
    out = tmp_path / "libstandin.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(c_file)], check=True)
    return out


def test_library_path_is_the_loaded_file():
    path = Path(fused_ops_py.library_path())
    assert path.is_file()
    if "FUSED_OPS_PY_LIBRARY" not in os.environ:
        assert path.parent.name == ".fused_ops_py.mesonpy.libs"


def test_cdef_declares_every_function_of_the_header():
    header = _ffi._header_path().read_text()
    declared = set(re.findall(r"FO_API\s+[\w\s\*]+?\b(fo_\w+)\s*\(", header))
    assert len(declared) >= 14
    for name in declared:
        assert callable(getattr(_ffi.lib, name)), name
    assert "FO_API" not in _ffi.cdef_from_header(header)


def test_no_entry_point_takes_more_than_eight_arguments():
    """Many arguments go in an argument struct, which can grow without
    breaking the ABI; a long positional list cannot."""
    header = _ffi._header_path().read_text()
    declared = set(re.findall(r"FO_API\s+[\w\s\*]+?\b(fo_\w+)\s*\(", header))
    counts = {name: len(_ffi.ffi.typeof(getattr(_ffi.lib, name)).args) for name in declared}
    assert max(counts.values()) <= 8, {name: n for name, n in counts.items() if n > 8}


def test_shipped_header_is_the_source_header():
    if not REPO_HEADER.exists():
        pytest.skip("not run from a source checkout")
    assert _ffi._header_path().read_text() == REPO_HEADER.read_text()


def test_versions_agree():
    version = _ffi.lib.fo_version()
    major, minor, patch = version // 10000, version // 100 % 100, version % 100
    if fused_ops_py.__version__ != "0+unknown":
        assert fused_ops_py.__version__ == f"{major}.{minor}.{patch}"
    header = _ffi._header_path().read_text()
    assert _ffi.lib.fo_abi_version() == _ffi._abi_version_of(header)


def test_environment_variable_swaps_the_library(tmp_path):
    copy = tmp_path / "elsewhere" / "libfused_ops_copy.so"
    copy.parent.mkdir()
    shutil.copy(fused_ops_py.library_path(), copy)
    result = import_with_library(copy, tmp_path)
    assert result.returncode == 0, result.stderr
    reported, mapped = result.stdout.split()
    assert reported == str(copy)
    assert mapped == str(copy)  # the process really mapped the other file


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp: tmp / "missing.so", ["does not exist", "missing.so", "FUSED_OPS_PY_LIBRARY"]),
        (
            lambda tmp: (tmp / "text.so").write_text("not a library") and tmp / "text.so",
            ["cannot load", "text.so", "FUSED_OPS_PY_LIBRARY"],
        ),
        (
            lambda tmp: build_shared_library("int unrelated(void) { return 1; }\n", tmp),
            ["not libfused_ops", "libstandin.so"],
        ),
        (
            lambda tmp: build_shared_library("int fo_abi_version(void) { return 999; }\n", tmp),
            ["ABI version 999", "needs ABI version", "libstandin.so", "FUSED_OPS_PY_LIBRARY"],
        ),
    ],
    ids=["missing", "not-a-library", "other-library", "other-abi"],
)
def test_bad_library_paths_raise_import_error(make, words, tmp_path):
    path = make(tmp_path)
    result = import_with_library(path, tmp_path)
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def test_env_report_runs_and_names_the_library(tmp_path):
    result = subprocess.run([sys.executable, "-m", "fused_ops_py"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for word in ["library path", fused_ops_py.library_path(), "ABI version", "torch", "CUDA built in"]:
        assert word in result.stdout


def test_selftest_passes_on_every_device(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "fused_ops_py", "selftest"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [l for l in result.stdout.splitlines() if l.startswith(("ok", "FAIL"))]
    assert len(lines) >= 8 and all(l.startswith("ok") for l in lines)
    assert "all ops agree with torch" in result.stdout
