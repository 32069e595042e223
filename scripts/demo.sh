#!/usr/bin/env bash
# The main job: install tuner, tune the bundled ResNet-style example on SQLite and a local Ray,
# then show the result applied (tuner compare: the default compile against backend="tuner" and
# tuner.compile, timed side by side in one fresh process) and write the HTML report.
# Extra arguments go to `tuner search` (e.g. --workers 2 --executor local).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
MODEL="${MODEL:-examples/resnet.py}"
scripts/install.sh
export TUNER_DB="${TUNER_DB:-sqlite:///$PWD/demo.db}"
"$VENV/bin/tuner" search "$MODEL" --trials "${TRIALS:-6}" --rounds "${CONFIRM_ROUNDS:-40}" "$@"
"$VENV/bin/tuner" best "$MODEL"
"$VENV/bin/tuner" compare "$MODEL" --rounds "${ROUNDS:-20}"
"$VENV/bin/tuner" report "$MODEL" --out demo-report
echo "report: $PWD/demo-report/index.html"
