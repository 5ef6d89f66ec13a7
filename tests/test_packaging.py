"""The wheel installs what meson.build lists: every module of the package
must be listed, or an installed fused_ops_py fails to import it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_meson_installs_every_python_module():
    meson = (ROOT / "meson.build").read_text()
    listed = set(re.findall(r"'(fused_ops_py/[\w/]+\.py)'", meson))
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fused_ops_py").rglob("*.py")}
    assert modules - listed == set(), "modules meson.build does not install"
    assert listed - modules == set(), "files meson.build lists that do not exist"
