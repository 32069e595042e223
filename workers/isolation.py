"""Run one job in a fresh, spawned Python process with a wall-clock deadline.

A fresh process isolates crashes in generated code: a spawned interpreter, or a spare forked
ahead from a zygote that has only imported (`workers/spares.py`, `workers/zygote.py`), never a
fork of a process that has run anything. The job and its result travel as JSON files.
A crash, a hang past the deadline, or a missing result become typed values:
a `Measurement` for a trial, a `ConfirmFailed` for a confirmation.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Mapping

from tuner.trial import (ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement, Status, TrialRequest, exceeded,
                         out_of_memory_line)
from tuner.workers.spares import SparePool
from tuner.workers.zygote import Forked

STDERR_TAIL = 3000
LOADED = "tuner: the trial process has loaded torch"    # its first stderr line (workers/trial_process.py)
STEP_FILE = "step.txt"     # in the job's folder: what a confirmation process was doing last (trial_process.mark_step)


@dataclass(frozen=True)
class NoResult:
    """A job's process left no result: it passed its deadline (TIMEOUT; its whole process
    group was killed) or died first (CRASHED). `message` says why, headline first."""

    status: Status
    message: str
    loaded_torch: bool = True       # a trial process said it had loaded torch (`LOADED`) before it ended
    step: str | None = None         # what it marked last in STEP_FILE (a confirmation's variant), if anything


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _death(code: int) -> str:
    """How a process that left no result ended. SIGKILL that was not our deadline's is most
    often Linux's out-of-memory killer (or the memory cap of a container)."""
    if code >= 0:
        return f"exited with status {code}"
    if code == -signal.SIGKILL:
        return "killed by SIGKILL (possibly out of memory)"
    return f"killed by {_signal_name(code)}"


def run_job(kind: str, payload: dict[str, Any], *, timeout_s: float, scratch: str | None = None,
            env: Mapping[str, str] | None = None, spares: SparePool | None = None) -> dict[str, Any] | NoResult:
    """Run `python -m tuner.workers.trial_process` on one job; its result JSON, or why there is none.

    The process runs in a scratch folder of its own, in its own session, with environment
    `env` (None: this process's). With `spares`, a spare forked with that same environment
    takes the job (`workers/spares.py`: it has imported already); without one, when none
    matches, or when its zygote died before forking it, a process starts cold. The job says
    when it was handed over (`handed_at`, this host's clock), so the trial measures its start. A
    `NoResult` after a death carries the exit status and the tail of stderr.
    """
    spare = spares.take(env) if spares is not None else None
    if spare is not None:
        try:
            job, result = _write_job(spare.folder, kind, payload)
            spare.proc.stdin.write(f"{job}\n{result}\n")
            spare.proc.stdin.flush()        # kept open until it ends: a FIFO no one holds loses its data
            outcome = _outcome(spare.proc, spare.stderr, spare.folder, timeout_s)
        finally:
            spare.discard()
        if not (isinstance(outcome, NoResult) and not spare.forked()):
            return outcome
        # Its zygote died before forking it (killed by a cancel, or it could not import): nothing ran.
    with tempfile.TemporaryDirectory(prefix="tuner-trial-", dir=scratch) as tmp:
        job, result = _write_job(Path(tmp), kind, payload)
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "tuner.workers.trial_process", str(job), str(result),
                                     str(os.getpid())],
                                    stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, env=env, start_new_session=True)
            return _outcome(proc, err, Path(tmp), timeout_s)


def _write_job(folder: Path, kind: str, payload: dict[str, Any]) -> tuple[Path, Path]:
    job = folder / "job.json"
    job.write_text(json.dumps({"kind": kind, "request": payload, "handed_at": time.time()}))
    return job, folder / "result.json"


def _outcome(proc: subprocess.Popen | Forked, err: IO[str], folder: Path,
             timeout_s: float) -> dict[str, Any] | NoResult:
    """Wait for a trial process that has its job: its result JSON, or why there is none."""
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return NoResult(Status.TIMEOUT, f"timeout: no result within {timeout_s:g} s; the trial process was killed")
    err.seek(0)
    everything = err.read()
    tail = everything[-STDERR_TAIL:]
    result = folder / "result.json"
    if code == 0 and result.exists():
        return json.loads(result.read_text())
    step_file = folder / STEP_FILE
    return NoResult(Status.CRASHED, f"trial process {_death(code)} before reporting a result\n{tail}",
                    loaded_torch=LOADED in everything,
                    step=(step_file.read_text() or None) if step_file.exists() else None)


def _kill_group(proc: subprocess.Popen | Forked) -> None:
    if proc.pid is None:        # a spare its zygote has not forked yet: once forked, it finds no folder and exits
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_isolated(request: TrialRequest, *, scratch: str | None = None, env: Mapping[str, str] | None = None,
                 spares: SparePool | None = None) -> Measurement:
    """Measure one trial in its own process (a spare from `spares` when one fits); never raises
    for a tuning failure. A trial with a memory cap starts cold: the cap must cover the imports."""
    if request.spec.memory_limit_mb is not None:
        spares = None
    data = run_job("trial", request.to_json(), timeout_s=request.timeout_s, scratch=scratch, env=env, spares=spares)
    if isinstance(data, NoResult):
        limit = request.spec.memory_limit_mb
        oom = out_of_memory_line(data.message) if limit is not None and data.status is Status.CRASHED else None
        if oom is not None:     # died of the cap before it could say so itself (e.g. loading a library)
            return Measurement.failed(Status.CRASHED, f"{exceeded(limit)}: the trial process died ({oom}); "
                                                      f"raise --memory-limit")
        if limit is not None and data.status is Status.CRASHED and not data.loaded_torch:
            # Killed (seen: SIGSEGV, no output) before torch finished loading under the cap: the cap's doing.
            return Measurement.failed(Status.CRASHED, f"{exceeded(limit)} while importing torch; raise --memory-limit")
        return Measurement.failed(data.status, data.message)
    return Measurement.from_json(data)


def confirm_isolated(request: ConfirmRequest, *, scratch: str | None = None, env: Mapping[str, str] | None = None,
                     spares: SparePool | None = None) -> ConfirmResult | ConfirmFailed:
    """Run one confirmation in its own process (a spare from `spares` when one fits), within `request.timeout_s`."""
    data = run_job("confirm", request.to_json(), timeout_s=request.timeout_s, scratch=scratch, env=env,
                   spares=spares)
    if isinstance(data, NoResult):
        return ConfirmFailed(data.status, data.message, variant=data.step)
    return ConfirmResult.from_json(data)
