#!/usr/bin/env bash
# The main job: install tuner, then search the bundled MLP example on SQLite and the local executor.
# Extra arguments go to `tuner search` (e.g. --workers 2 --executor ray).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
scripts/install.sh
export TUNER_DB="${TUNER_DB:-sqlite:///$PWD/demo.db}"
"$VENV/bin/tuner" search examples/mlp.py --trials "${TRIALS:-12}" "$@"
"$VENV/bin/tuner" best examples/mlp.py
