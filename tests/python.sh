#!/bin/sh
# Runs a Python test with the interpreter that has PyTorch (Debian's python3
# first: a pyenv python does not see python3-torch). Without one the test
# prints a SKIP line itself.
for py in /usr/bin/python3 python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import torch' >/dev/null 2>&1; then
        exec "$py" "$@"
    fi
done
for py in /usr/bin/python3 python3; do
    command -v "$py" >/dev/null 2>&1 && exec "$py" "$@"
done
echo "SKIP $1: no python3 on this machine"; echo "RESULT: 0 passed, 0 failed, 1 skipped"
