#!/usr/bin/env bash
# The main job: install fused-ops-py, print the environment report, and train
# a small model with the fused ops against the same model in plain torch (on
# the GPU if there is one, else on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
python -m pip install -q --no-deps --force-reinstall --no-build-isolation .
cd "${TMPDIR:-/tmp}"  # import the installed package, not the source tree
python -m fused_ops_py
python -m fused_ops_py demo
