#!/bin/sh
# tools/scripts/gpu_check.sh OUT - make gpu-check: the CUDA companion on a real GPU.
# The work is tools/scripts/gpu_check.py (its docstring says what runs); this wrapper
# only finds python3. Exit status: 0 passed, 1 a step failed, 2 usage or no
# python3, 3 no NVIDIA GPU here (nothing run).
if ! command -v python3 >/dev/null 2>&1; then
    echo "gpu-check: python3 is needed and not found; nothing run"
    exit 2
fi
exec python3 "$(dirname "$0")/gpu_check.py" "$@"
