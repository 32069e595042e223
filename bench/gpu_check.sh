#!/usr/bin/env bash
# Get a GPU run of bench/gpu_check.py ready: fill .whl/ (bench/gpu/gpu_wheels.sh: the wheels the GPU
# machine lacks and a fresh wheel of tuner), print the plan (each section, its cap, what it
# verifies), then the exact device command line, the paths to carry and the timeout to give it.
#
#   bash bench/gpu_check.sh              # build .whl, then print the plan and the command
#   bash bench/gpu_check.sh --print      # print them only (.whl/ built already)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
if [ "${1:-}" != "--print" ]; then
    bash bench/gpu/gpu_wheels.sh
fi
ls .whl/tuner-*.whl > /dev/null 2>&1 || { echo "error: .whl/ holds no tuner wheel; run: bash bench/gpu/gpu_wheels.sh" >&2; exit 1; }
python3 -P bench/gpu_check.py --plan
cat <<'CMD'

device command (repository root; OUT is set by the device tool, the report comes back as $OUT/gpu_check.txt):

R=$PWD && { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || for w in .whl/*.whl; do python3 -m zipfile -e "$w" /tmp/site; done; } && export PYTHONPATH=/tmp/site && cd /tmp && python3 -P "$R/bench/gpu_check.py"

carry: [".whl"]
timeout_s: 600  (the sections' caps sum within 495 s; the install takes seconds)
one section again: append --sections KEY (and --cap KEY=S for more time), e.g. --sections search --cap search=400
CMD
