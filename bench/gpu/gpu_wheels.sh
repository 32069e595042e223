#!/usr/bin/env bash
# Fill .whl/ (repository root, git-ignored) with the wheels bench/gpu_check.py needs on the lent
# GPU machine, which has Python 3.12, torch, triton, numpy, pyyaml, tqdm, markupsafe, packaging,
# typing-extensions and pytest, but no network: the third-party wheels tuner needs beyond
# those (pinned to the versions in .venv, downloaded only when missing), and a fresh wheel of
# tuner itself (always rebuilt, from a clean copy of the work tree: a stale build/lib would
# ship modules that no longer exist). Run it again right before a GPU run.
#
#   bash bench/gpu/gpu_wheels.sh        # then carry .whl to the device (see bench/gpu_check.py)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV_PY=${VENV_PY:-$REPO/.venv/bin/python}
DL_PY=${DL_PY:-python3}
WHL=$REPO/.whl
# What the GPU machine already has (normalized names): never bundled.
PRESENT="torch triton numpy pyyaml tqdm markupsafe packaging typing-extensions pytest"
WANTED="optuna sqlalchemy alembic mako colorlog greenlet"

cd "$REPO"
mkdir -p "$WHL"
EXCLUDE=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$EXCLUDE")"
grep -qxF '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"

norm() { echo "$1" | tr '[:upper:]_.' '[:lower:]--'; }

venv_version() {  # the version installed in .venv, or nothing
    { "$VENV_PY" -m pip show "$1" 2>/dev/null || true; } | sed -n 's/^Version: //p'
}

have_wheel() {  # a wheel of this (normalized) name is in .whl/ already
    local n
    for f in "$WHL"/*.whl; do
        [ -e "$f" ] || return 1
        n=$(basename "$f"); n=${n%%-*}
        [ "$(norm "$n")" = "$1" ] && return 0
    done
    return 1
}

download() {  # NAME: fetch NAME==<.venv version> as a cp312 manylinux (or pure-python) wheel
    local name=$1 version
    version=$(venv_version "$name")
    if [ -z "$version" ]; then
        echo "skip $name: not installed in .venv (so nothing there needs it)"
        return 0
    fi
    if have_wheel "$(norm "$name")"; then
        echo "have $name"
        return 0
    fi
    echo "download $name==$version"
    "$DL_PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$WHL" "$name==$version"
}

missing_requirements() {  # names required (no extra, markers true on CPython 3.12 Linux) but absent
    "$VENV_PY" - "$WHL" "$PRESENT" <<'EOF'
import re, sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement

whl, present = Path(sys.argv[1]), set(sys.argv[2].split())
env = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "sys_platform": "linux", "os_name": "posix",
       "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
bundled = {norm(p.name.split("-")[0]) for p in whl.glob("*.whl")}
needed = set()
for wheel in whl.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:"):
                req = Requirement(line.split(":", 1)[1].strip())
                if req.marker is None or req.marker.evaluate(env):
                    needed.add(norm(req.name))
print(" ".join(sorted(needed - bundled - present - {"tuner", "ray"})))
EOF
}

for name in $WANTED; do download "$name"; done
# The closure: whatever a bundled wheel requires that neither the GPU machine nor .whl/ has.
for _ in 1 2 3; do
    extra=$(missing_requirements)
    [ -z "$extra" ] && break
    for name in $extra; do download "$name"; done
done

# tuner itself, from the tracked and untracked-but-not-ignored files as they are now.
rm -f "$WHL"/tuner-*.whl
SRC=$(mktemp -d /tmp/tuner-wheel-src.XXXXXX)
trap 'rm -rf "$SRC"' EXIT
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
    [ -f "$f" ] && printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$SRC"
"$VENV_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHL" "$SRC"
# The listing is read whole first: `unzip -l | grep -q` under pipefail fails when grep stops at its
# first match and unzip, still writing, dies of SIGPIPE (seen: "lacks tuner/migrations/script.py.mako").
listing=$(unzip -l "$WHL"/tuner-*.whl)
for need in tuner/storage/__init__.py tuner/workers/trial_process.py tuner/migrations/script.py.mako \
            tuner/search_spaces/cuda.py tuner/cli/__init__.py; do
    grep -q " $need\$" <<< "$listing" || { echo "error: tuner wheel lacks $need" >&2; exit 1; }
done

echo "still missing: $(missing_requirements)"
ls -l "$WHL"
du -sh "$WHL"
