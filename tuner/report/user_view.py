"""`tuner compare`'s user's view: each path in a fresh process that does nothing before it times.

A process's history moves the speed of the same compiled model (glibc's allocator: docs/measurement.md,
"Process state"), so the paired table of `compare_applied`, taken in one process, is beside these
figures: rounds of one fresh Python process per path, in an order shuffled per round, each of which
imports torch, loads the model file, compiles it one way, warms up and times whole calls, and prints
the median. The paths: the default compile; `backend="tuner"`; `tuner.compile`; the code `tuner best
--emit python` writes, run after a default compile of a copy in the same script (as a user checks a
speedup), in a program started with its RUNTIME_ENV (as `tuner run` starts it); and `backend="tuner"`
in a program started by `tuner run` (the stored runtime knobs set).
Each path's speedup is the median of per-round ratios to the default compile's process of the same
round, with its interval.

The child is `run_path` (a small script calls it in the fresh interpreter); it checks nothing against
eager: the paired table did, in the parent.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.trial import Speedup, paired_speedup

__all__ = ["FreshView", "PATHS", "median_ms", "run_path", "user_view"]

DEFAULT, BACKEND, TUNER_COMPILE, EMITTED, LAUNCHER = ("default compile", 'backend="tuner"', "tuner.compile",
                                                      "emitted code", "tuner run + backend")
PATHS = (DEFAULT, BACKEND, TUNER_COMPILE, EMITTED, LAUNCHER)
SAMPLES, SAMPLE_S, WARMUP_S = 15, 0.010, 0.3
_CHILD = "import sys\nfrom tuner.report.user_view import run_path\nrun_path(*sys.argv[1:])\n"


@dataclass(frozen=True)
class FreshView:
    """Per path, one latency per round (None: that process failed), and the first failure's line."""

    round_ms: dict[str, tuple[float | None, ...]]
    failures: dict[str, str]

    def latency_ms(self, path: str) -> float | None:
        values = [v for v in self.round_ms.get(path, ()) if v is not None]
        return statistics.median(values) if values else None

    def speedup(self, path: str) -> Speedup | None:
        pairs = [(b, v) for b, v in zip(self.round_ms.get(DEFAULT, ()), self.round_ms.get(path, ()))
                 if b is not None and v is not None]
        return paired_speedup([b for b, _ in pairs], [v for _, v in pairs]) if pairs else None


def user_view(model_path: str, *, rounds: int, seed: int, snippet: str | None, db_url: str,
              threads: int | None) -> FreshView:
    """`rounds` rounds of a fresh process per path (the emitted code's only with a `snippet`)."""
    paths = [p for p in PATHS if p != EMITTED or snippet]
    got: dict[str, list[float | None]] = {p: [] for p in paths}
    failures: dict[str, str] = {}
    rng = random.Random(f"{seed}/user-view")
    with tempfile.TemporaryDirectory(prefix="tuner-compare-") as folder:
        child = Path(folder) / "fresh_path.py"
        child.write_text(_CHILD)
        if snippet:
            (Path(folder) / "emitted.py").write_text(snippet)
        env = {**os.environ, "TUNER_DB": db_url, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
        for _ in range(rounds):
            for path in rng.sample(paths, len(paths)):
                ms, failure = _one(path, model_path, seed, child, folder, env)
                got[path].append(ms)
                if failure and path not in failures:
                    failures[path] = failure
    return FreshView({p: tuple(v) for p, v in got.items()}, failures)


def _one(path: str, model_path: str, seed: int, child: Path, folder: str,
         env: dict[str, str]) -> tuple[float | None, str | None]:
    model = str(Path(model_path).resolve())
    args = [str(child), path, model, str(seed), str(Path(folder) / "emitted.py")]
    if path in (LAUNCHER, EMITTED):     # the emitted code's program is started as it says: with RUNTIME_ENV
        cmd = [sys.executable, "-m", "tuner", "run", "--model", model, *args]
    else:
        cmd = [sys.executable, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder, timeout=900)
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{")), None)
    if done.returncode or line is None:
        said = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
        return None, f"exit {done.returncode}: {said[-1][:200] if said else 'no output'}"
    return float(json.loads(line)["ms"]), None


# --- in the fresh process -----------------------------------------------------------------------------

def run_path(path: str, model_path: str, seed: str, emitted: str) -> None:
    """The child: compile the model file `path`'s way, warm up, time; print {"ms": median}."""
    import torch

    from tuner.workload import load_model_file

    loaded = load_model_file(model_path, seed=int(seed))
    with torch.no_grad():
        model = _compiled(path, loaded, model_path, int(seed), emitted)
        call = lambda: loaded.call(model)  # noqa: E731
        print(json.dumps({"ms": median_ms(call)}), flush=True)


def _compiled(path: str, loaded: Any, model_path: str, seed: int, emitted: str) -> Any:
    import torch

    if path == DEFAULT:
        model = torch.compile(loaded.model)
    elif path in (BACKEND, LAUNCHER):
        model = torch.compile(loaded.model, backend="tuner")
    elif path == TUNER_COMPILE:
        import tuner

        model = tuner.compile(loaded.model)
    else:           # the emitted code, after a default compile of a copy in the same script
        from tuner.workload import load_model_file

        copy = load_model_file(model_path, seed=seed)
        copy.call(torch.compile(copy.model))
        namespace: dict[str, Any] = {}
        exec(compile(Path(emitted).read_text(), "emitted.py", "exec"), namespace)
        model = namespace["tuned_compile"](loaded.model)
        with namespace["first_call"]():
            loaded.call(model)
    return model


def median_ms(call: Any) -> float:
    """`call` warmed up for WARMUP_S, then the median of SAMPLES samples of SAMPLE_S each, in ms per call:
    how a user's program times a model (bench/process_state.py times its states the same way)."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < WARMUP_S:
        call()
    once = time.perf_counter()
    call()
    calls = max(1, int(SAMPLE_S / max(time.perf_counter() - once, 1e-7)) + 1)
    samples = []
    for _ in range(SAMPLES):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - began) * 1000 / calls)
    return statistics.median(samples)
