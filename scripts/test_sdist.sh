#!/usr/bin/env bash
# The sdist in dist/ (scripts/build_wheel.sh) must build where no wheel fits:
# pip builds a wheel from it as it would for such a user (isolated, the build
# requirements from PyPI), CPU-only to spare a second CUDA build; the wheel is
# installed into a scratch directory and a fresh interpreter compares one op
# with torch. Runs with the python on PATH, which needs torch (scripts/
# setup_env.sh's venv).
set -euo pipefail
cd "$(dirname "$0")/.."
work="$PWD/build/rel-sdist"
rm -rf "$work"
mkdir -p "$work"
sdist="$(echo dist/fused_ops_py-*.tar.gz)"
echo "== a CPU-only wheel from $sdist"
python -m pip wheel -q --no-deps -w "$work/wheel" -Csetup-args=-Dcuda=disabled "$sdist"
python -m pip install -q --no-deps --target "$work/site" "$work"/wheel/fused_ops_py-*.whl
cd "$work"
env -u FUSED_OPS_PY_LIBRARY PYTHONPATH="$work/site" python - "$work/site" <<'EOF'
import sys
import torch
import fused_ops_py

site = sys.argv[1]
assert fused_ops_py.__file__.startswith(site), fused_ops_py.__file__
assert fused_ops_py.library_path().startswith(site), fused_ops_py.library_path()
torch.manual_seed(0)
x, weight = torch.randn(37, 129), torch.randn(129)
expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
torch.testing.assert_close(fused_ops_py.fused_rms_norm(x, weight, eps=1e-6), expected)
print(f"ok: fused_rms_norm from the sdist's wheel matches torch ({fused_ops_py.library_path()})")
EOF
