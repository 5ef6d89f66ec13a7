#!/usr/bin/env bash
# The wheel that scripts/test.sh built (dist/), on the newest CPython we
# support (3.13, from pyenv: scripts/find_python.sh) with the newest torch
# from PyPI: installed into its own venv, then `python -m fused_ops_py
# selftest` (every op on every device against torch). The venv is made once
# and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
NEW_PYTHON="${FUSED_OPS_PY_NEW_PYTHON:-3.13}"
VENV_NEW="${FUSED_OPS_PY_VENV_NEW:-$PWD/.venv-py$NEW_PYTHON}"
if [ ! -x "$VENV_NEW/bin/python" ]; then
    echo "== creating $VENV_NEW with CPython $NEW_PYTHON and torch (a few GB from PyPI)"
    "$(scripts/find_python.sh "$NEW_PYTHON")" -m venv "$VENV_NEW"
    "$VENV_NEW/bin/python" -m pip install -q --upgrade pip
fi
"$VENV_NEW/bin/python" -m pip install -q torch cffi numpy
"$VENV_NEW/bin/python" -m pip install -q --no-deps --force-reinstall dist/fused_ops_py-*.whl
echo "== selftest, the same wheel on torch $("$VENV_NEW/bin/python" -c 'import torch; print(torch.__version__)')," \
    "CPython $("$VENV_NEW/bin/python" -c 'import platform; print(platform.python_version())')"
cd "$VENV_NEW"
env -u FUSED_OPS_PY_LIBRARY "$VENV_NEW/bin/python" -m fused_ops_py selftest
