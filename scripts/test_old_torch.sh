#!/usr/bin/env bash
# The wheel that scripts/test.sh built (dist/), tested again against the
# oldest torch we test, on the oldest CPython we support (3.9, from pyenv:
# scripts/find_python.sh): one wheel must keep working across torch and
# Python releases. Features the old torch lacks skip with a message (see
# README).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD_TORCH="${FUSED_OPS_PY_OLD_TORCH:-2.4.1}"
OLD_PYTHON="${FUSED_OPS_PY_OLD_PYTHON:-3.9}"
VENV_OLD="${FUSED_OPS_PY_VENV_OLD:-$PWD/.venv-torch-$OLD_TORCH-py$OLD_PYTHON}"
if [ ! -x "$VENV_OLD/bin/python" ]; then
    echo "== creating $VENV_OLD with CPython $OLD_PYTHON and torch $OLD_TORCH"
    "$(scripts/find_python.sh "$OLD_PYTHON")" -m venv "$VENV_OLD"
    "$VENV_OLD/bin/python" -m pip install -q --upgrade pip
fi
# torch 2.4 was built against numpy 1.x
"$VENV_OLD/bin/python" -m pip install -q "torch==$OLD_TORCH" "numpy<2" pytest cffi
"$VENV_OLD/bin/python" -m pip install -q --no-deps --force-reinstall dist/fused_ops_py-*.whl
echo "== pytest, the same wheel on torch $("$VENV_OLD/bin/python" -c 'import torch; print(torch.__version__)')," \
    "CPython $("$VENV_OLD/bin/python" -c 'import platform; print(platform.python_version())')"
"$VENV_OLD/bin/pytest" -q tests
