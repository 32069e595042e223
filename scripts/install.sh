#!/usr/bin/env bash
# Create (or reuse) a virtual environment and install tuner into it, not editable.
# Usage: scripts/install.sh [extras]    e.g. scripts/install.sh test   or   postgres,dashboard
# VENV picks the folder (default .venv). Torch is installed first, pinned, only when the
# venv has none: a bare `torch` requirement would pull a multi-GB CUDA build.
# It prints nothing but errors (pip -qq: no progress, no notices, no warnings). An extra that
# pyproject.toml does not declare is refused before anything is created (pip would only warn).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
EXTRAS="${1:-}"
# The extras pyproject.toml declares: the keys of [project.optional-dependencies].
KNOWN=$(awk '/^\[/{on=($0=="[project.optional-dependencies]"); next} on && /^[a-z0-9_-]+ *=/{print $1}' pyproject.toml)
IFS=',' read -r -a WANTED <<< "$EXTRAS"
for extra in "${WANTED[@]}"; do
  if ! grep -qx -- "$extra" <<< "$KNOWN"; then
    echo "error: unknown extra '$extra' for scripts/install.sh; choose from: $(echo $KNOWN | sed 's/ /, /g') (comma-separated)" >&2
    exit 2
  fi
done
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
PIP=("$VENV/bin/python" -m pip install -qq)
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"${PIP[@]}" --upgrade pip
"$VENV/bin/python" -c "import torch" 2>/dev/null || "${PIP[@]}" "torch==${TUNER_TORCH_VERSION:-2.13.0}"
# setuptools builds in ./build and reuses what is there: modules moved or deleted since an earlier
# install would come back into the wheel from it.
rm -rf build
"${PIP[@]}" --force-reinstall --no-deps .
"${PIP[@]}" ".${EXTRAS:+[$EXTRAS]}"
