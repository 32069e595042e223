#!/usr/bin/env bash
# Install tuner with its test extras, PostgreSQL, Chromium and the allocators jemalloc and TCMalloc,
# then run the test suite with pytest, in two worker processes (pytest-xdist; the Ray tests share
# one of them, see tests/conftest.py).
# Extra arguments go to pytest (e.g. -m "not slow", or -n 0 for one process).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  # tests/conftest.py starts a throw-away server on 127.0.0.1 from this package.
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq postgresql >/dev/null; fi
fi
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  # tests/report/test_report.py opens the report page in headless Chromium through this driver, offline.
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium chromium-driver >/dev/null; fi
fi
if ! ls /usr/lib/*/libjemalloc.so.2 /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1; then
  # The runtime knobs' allocators (tuner/runtime/allocators.py): tests preload the system's own libraries.
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq libjemalloc2 libtcmalloc-minimal4 >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq libjemalloc2 libtcmalloc-minimal4 >/dev/null; fi
fi
scripts/install.sh test
# Run from the repo root through the venv's pytest script: the tests import the installed
# package (pyproject sets --import-mode=importlib, so the source folders never shadow it).
exec "$VENV/bin/pytest" -n "${TEST_WORKERS:-2}" --dist loadgroup "$@"
