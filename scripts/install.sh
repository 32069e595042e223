#!/usr/bin/env bash
# Create (or reuse) a virtual environment and install tuner into it, not editable.
# Usage: scripts/install.sh [extras]    e.g. scripts/install.sh test
# VENV picks the folder (default .venv). Torch is installed first, pinned, only when the
# venv has none: a bare `torch` requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
EXTRAS="${1:-}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -c "import torch" 2>/dev/null || "$VENV/bin/pip" install -q "torch==${TUNER_TORCH_VERSION:-2.13.0}"
if [ -n "$EXTRAS" ]; then
  "$VENV/bin/pip" install -q --force-reinstall --no-deps . && "$VENV/bin/pip" install -q ".[$EXTRAS]"
else
  "$VENV/bin/pip" install -q --force-reinstall --no-deps . && "$VENV/bin/pip" install -q .
fi
