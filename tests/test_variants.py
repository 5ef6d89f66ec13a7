"""Which bundled build the loader picks: the CUDA 13 (default) one or the
CUDA 12 one, from the driver's CUDA version and the files in the wheel; and
that $FUSED_OPS_PY_LIBRARY still wins. The imports run in a fresh
interpreter, on a copy of the package laid out as the wheel installs it, with
no driver or with a stand-in libcuda.so.1 that reports a chosen version."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fused_ops_py
from fused_ops_py import _ffi

DEFAULT = _ffi.DEFAULT_LIBRARY
CUDA12 = _ffi.CUDA12_LIBRARY
BOTH = {DEFAULT, CUDA12}


@pytest.mark.parametrize(
    "driver, present, chosen, words",
    [
        (None, BOTH, DEFAULT, ["default build", "no CUDA driver"]),
        (None, {DEFAULT}, DEFAULT, ["default build", "no CUDA driver"]),
        (13000, BOTH, DEFAULT, ["default build", "supports CUDA 13.0"]),
        (13020, {DEFAULT}, DEFAULT, ["default build", "supports CUDA 13.2"]),
        (12090, BOTH, CUDA12, ["CUDA 12 build", "supports CUDA 12.9, below 13.0"]),
        (12000, BOTH, CUDA12, ["CUDA 12 build", "supports CUDA 12.0"]),
        (12040, {DEFAULT}, DEFAULT, ["only CUDA 12.4", "no CUDA 12 build is bundled"]),
        (11080, BOTH, DEFAULT, ["only CUDA 11.8", "every build needs 12.0+"]),
    ],
)
def test_choose_variant(driver, present, chosen, words):
    name, reason = _ffi.choose_variant(driver, present)
    assert name == chosen
    for word in words:
        assert word in reason, (word, reason)


def test_cuda_version_text():
    assert [_ffi.cuda_version_text(v) for v in (12040, 13000, 12090, 11080)] == ["12.4", "13.0", "12.9", "11.8"]


def compile_library(source, out):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build a stand-in library")
    c_file = out.with_suffix(".c")
    c_file.write_text(source)
    subprocess.run([compiler, "-shared", "-fPIC", f"-Wl,-soname,{out.name}", "-o", str(out), str(c_file)], check=True)
    return out


def stand_in_driver(tmp_path, version):
    """A directory holding a libcuda.so.1 whose cuDriverGetVersion reports `version`."""
    directory = tmp_path / f"driver{version}"
    directory.mkdir()
    compile_library(f"int cuDriverGetVersion(int *v) {{ *v = {version}; return 0; }}\n", directory / "libcuda.so.1")
    return directory


@pytest.fixture
def site(tmp_path):
    """site-packages as the wheel installs it: the package, and both builds
    (copies of the library under test) in .fused_ops_py.mesonpy.libs."""
    site = tmp_path / "site"
    package = site / "fused_ops_py"
    shutil.copytree(Path(fused_ops_py.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    if not (package / "fused_ops.h").exists():
        shutil.copy(_ffi._header_path(), package / "fused_ops.h")
    libs = site / ".fused_ops_py.mesonpy.libs"
    libs.mkdir()
    for name in (DEFAULT, CUDA12):
        shutil.copy(fused_ops_py.library_path(), libs / name)
    return site


def import_from(site, driver_dir=None, library=None, code=None):
    """Import the copied package in a fresh interpreter; returns the lines it printed:
    the driver version, the library path, the mapped file, the origin, x * x for x = 1..3."""
    env = {k: v for k, v in os.environ.items() if k not in ("FUSED_OPS_PY_LIBRARY", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(site)
    if driver_dir is not None:
        env["LD_LIBRARY_PATH"] = str(driver_dir)
    if library is not None:
        env["FUSED_OPS_PY_LIBRARY"] = str(library)
    code = code or (
        "import torch, fused_ops_py\n"
        "from fused_ops_py import _ffi\n"
        "print(_ffi.driver_version)\n"
        "print(fused_ops_py.library_path())\n"
        "print([l.split()[-1] for l in open('/proc/self/maps') if 'fused_ops' in l][0])\n"
        "print(_ffi.library_origin)\n"
        "print(fused_ops_py.square(torch.tensor([1.0, 2.0, 3.0])).tolist())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd=site.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def driver_loadable():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(driver_loadable(), reason="a CUDA driver is installed here")
def test_without_a_driver_the_default_build_loads_and_computes(site):
    driver, path, mapped, origin, squares = import_from(site)
    assert driver == "None"
    assert path == str(site / ".fused_ops_py.mesonpy.libs" / DEFAULT)
    assert mapped == path
    assert "no CUDA driver found" in origin and "FUSED_OPS_PY_LIBRARY is not set" in origin
    assert squares == "[1.0, 4.0, 9.0]"


@pytest.mark.parametrize("version, chosen", [(12040, CUDA12), (13000, DEFAULT), (11080, DEFAULT)])
def test_the_driver_version_picks_the_build(site, tmp_path, version, chosen):
    driver, path, mapped, origin, squares = import_from(site, stand_in_driver(tmp_path, version))
    if driver != str(version):
        pytest.skip(f"a real libcuda.so.1 answered ({driver}), not the stand-in")
    assert path == str(site / ".fused_ops_py.mesonpy.libs" / chosen)
    assert mapped == path
    assert _ffi.cuda_version_text(version) in origin
    assert squares == "[1.0, 4.0, 9.0]"


def test_an_old_driver_without_the_cuda12_build_gets_the_default(site, tmp_path):
    (site / ".fused_ops_py.mesonpy.libs" / CUDA12).unlink()
    driver, path, mapped, origin, _ = import_from(site, stand_in_driver(tmp_path, 12040))
    if driver != "12040":
        pytest.skip(f"a real libcuda.so.1 answered ({driver}), not the stand-in")
    assert mapped == path == str(site / ".fused_ops_py.mesonpy.libs" / DEFAULT)
    assert "no CUDA 12 build is bundled" in origin


def test_the_environment_variable_wins_over_the_driver(site, tmp_path):
    chosen = tmp_path / "elsewhere" / "libfused_ops_mine.so"
    chosen.parent.mkdir()
    shutil.copy(fused_ops_py.library_path(), chosen)
    _, path, mapped, origin, squares = import_from(site, stand_in_driver(tmp_path, 12040), library=chosen)
    assert mapped == path == str(chosen)
    assert origin == "from $FUSED_OPS_PY_LIBRARY"
    assert squares == "[1.0, 4.0, 9.0]"


def test_env_report_names_the_driver_and_the_choice(site, tmp_path):
    lines = import_from(
        site, stand_in_driver(tmp_path, 12040), code="from fused_ops_py.__main__ import env_report; env_report()"
    )
    rows = {line.split("  ")[0]: line.split("  ", 1)[1].strip() for line in lines if "  " in line}
    if rows["CUDA driver supports"] != "12.4":
        pytest.skip(f"a real libcuda.so.1 answered ({rows['CUDA driver supports']}), not the stand-in")
    assert rows["library path"].endswith(CUDA12)
    assert rows["library chosen"].startswith("bundled in the package, the CUDA 12 build")
