#!/usr/bin/env bash
# Prints the path of a CPython X.Y interpreter: pyenv's newest X.Y.* if pyenv
# has one, else pythonX.Y on PATH. The test legs that pin a Python use it.
# Usage: scripts/find_python.sh 3.9
set -euo pipefail
want="$1"
root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
for candidate in $(ls -d "$root/versions/$want".* 2>/dev/null | sort -V -r) ""; do
    if [ -n "$candidate" ] && "$candidate/bin/python$want" -c "" 2>/dev/null; then
        echo "$candidate/bin/python$want"
        exit 0
    fi
done
if command -v "python$want" >/dev/null && "python$want" -c "" 2>/dev/null; then
    command -v "python$want"
    exit 0
fi
echo "find_python.sh: no CPython $want (pyenv install $want, or put python$want on PATH)" >&2
exit 1
