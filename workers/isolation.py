"""Run one job in a fresh, spawned Python process with a wall-clock deadline.

A fresh process isolates crashes in generated code: a spawned interpreter, or a spare forked
ahead from a zygote that has only imported (`workers/spares.py`, `workers/zygote.py`), never a
fork of a process that has run anything. The job and its result travel as JSON files.
A crash, a hang past the deadline, or a missing result become typed values:
a `Measurement` for a trial, a `ConfirmFailed` for a confirmation.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Mapping

from tuner.trial import (ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement, ProcessRequest, ProcessTiming,
                         Status, TrialRequest, exceeded, out_of_memory_line)
from tuner.workers.groups import Spawned
from tuner.workers.scratch import process_folder
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
    holding: int | None = None      # how many variants it held then, where it said
    code: int | None = None         # its exit status (negative: the signal that ended it); None: the deadline's kill


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

    The process runs in a scratch folder of its own under `scratch` (None: this process's own
    folder, `workers/scratch.py`), in its own session, with environment `env` (None: this
    process's). With `spares`, a spare forked with that same environment takes the job
    (`workers/spares.py`: it has imported already); without one, or when none matches, a process
    starts cold. The job has one deadline, `timeout_s` from now: a spare whose zygote died before
    forking it (nothing ran) leaves the rest of it to a cold process, and a spare still not forked
    at the deadline is a TIMEOUT (`SparePool.never_forked` judges its zygote). However the
    process ends, its whole process group is killed before we return (`workers/groups.py`). The
    job says when it was handed over (`handed_at`, this host's clock), so the trial measures its
    start. A `NoResult` after a death carries the exit status and the tail of stderr.
    """
    deadline = time.monotonic() + timeout_s
    spare = spares.take(env) if spares is not None else None
    if spare is not None:
        try:
            job, result = _write_job(spare.folder, kind, payload)
            spare.proc.stdin.write(f"{job}\n{result}\n")
            spare.proc.stdin.flush()        # kept open until it ends: a FIFO no one holds loses its data
            outcome = _outcome(spare.proc, spare.stderr, spare.folder, deadline, timeout_s)
        finally:
            spare.discard()
        if spare.forked():
            return outcome
        if time.monotonic() >= deadline:
            spares.never_forked(spare)
            return NoResult(Status.TIMEOUT, f"timeout: no result within {timeout_s:g} s; the spare trial process "
                                            f"that took the job was never forked (its zygote was still importing, "
                                            f"or stuck), so the job never ran")
        spares.fill(env)        # its zygote died before forking it (a cancel, or it could not import): nothing ran
    with tempfile.TemporaryDirectory(prefix="tuner-trial-", dir=scratch or process_folder()) as tmp:
        job, result = _write_job(Path(tmp), kind, payload)
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            proc = Spawned(subprocess.Popen([sys.executable, "-m", "tuner.workers.trial_process", str(job),
                                             str(result), str(os.getpid())],
                                            stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, env=env,
                                            start_new_session=True))
            with _running(proc, tmp):
                return _outcome(proc, err, Path(tmp), deadline, timeout_s)


def _write_job(folder: Path, kind: str, payload: dict[str, Any]) -> tuple[Path, Path]:
    job = folder / "job.json"
    job.write_text(json.dumps({"kind": kind, "request": payload, "handed_at": time.time()}))
    return job, folder / "result.json"


def _outcome(proc: Spawned | Forked, err: IO[str], folder: Path, deadline: float,
             timeout_s: float) -> dict[str, Any] | NoResult:
    """Wait, until `deadline` (time.monotonic()), for a trial process that has its job: its
    result JSON, or why there is none. Either way its process group is gone."""
    try:
        code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        return NoResult(Status.TIMEOUT, f"timeout: no result within {timeout_s:g} s; the trial process was killed")
    err.seek(0)
    everything = err.read()
    tail = everything[-STDERR_TAIL:]
    result = folder / "result.json"
    if code == 0 and result.exists():
        return json.loads(result.read_text())
    step_file = folder / STEP_FILE
    step, _, holding = (step_file.read_text() if step_file.exists() else "").partition("\n")
    return NoResult(Status.CRASHED, f"trial process {_death(code)} before reporting a result\n{tail}",
                    loaded_torch=LOADED in everything, step=step or None,
                    holding=int(holding) if holding.isdigit() else None, code=code)


# Cold trial processes in flight -> (their folder, whether the thread waiting on them was interrupted).
_RUNNING: dict[Spawned, tuple[str, bool]] = {}
_RUNNING_LOCK = threading.Lock()


@contextlib.contextmanager
def _running(proc: Spawned, folder: str) -> Iterator[None]:
    """`proc` is in flight inside the block. Left by an exception (Ctrl-C while a confirmation
    waits), it stays listed, abandoned: `kill_jobs_under` kills and reaps it."""
    with _RUNNING_LOCK:
        _RUNNING[proc] = (folder, False)
    try:
        yield
    except BaseException:
        with _RUNNING_LOCK:
            _RUNNING[proc] = (folder, True)
        raise
    with _RUNNING_LOCK:
        del _RUNNING[proc]


def kill_jobs_under(root: str) -> None:
    """SIGKILL the process group of each cold trial process in flight whose folder is under `root`:
    its waiting thread then sees it end and reaps it (an abandoned one is reaped here). Spares
    belong to their pool (`SparePool.kill_zygotes`)."""
    with _RUNNING_LOCK:
        procs = [(proc, abandoned) for proc, (folder, abandoned) in _RUNNING.items()
                 if folder.startswith(os.path.join(root, ""))]
        for proc, abandoned in procs:
            if abandoned:
                del _RUNNING[proc]
    for proc, abandoned in procs:
        if abandoned:
            proc.kill()
        else:
            proc.end_group()


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
    """Run one confirmation in its own process (a spare from `spares` when one fits), within `request.timeout_s`.
    Killed by SIGKILL (not the deadline's: the kernel's out-of-memory killer sends it) while it held
    several variants, it is `crowded` with that many."""
    data = run_job("confirm", request.to_json(), timeout_s=request.timeout_s, scratch=scratch, env=env,
                   spares=spares)
    if isinstance(data, NoResult):
        killed = data.code == -signal.SIGKILL and data.holding is not None and data.holding > 1
        return ConfirmFailed(data.status, data.message, variant=data.step, crowded=data.holding if killed else None)
    return ConfirmResult.from_json(data)


def time_isolated(request: ProcessRequest, *, scratch: str | None = None, env: Mapping[str, str] | None = None,
                  spares: SparePool | None = None) -> ProcessTiming:
    """Time one config in a process of its own started with the request's runtime knobs (`env`, None:
    this process's, plus what `tuner.runtime.RuntimeConfig.start_env` adds: an allocator preloaded,
    OpenMP's environment), a spare of a zygote started so when `spares` has one; never raises for a
    failed process. A runtime knob this node cannot run is a failure saying so."""
    from tuner.errors import TunerError
    from tuner.runtime import RuntimeConfig

    try:
        started = RuntimeConfig.from_dict(dict(request.runtime)).start_env(os.environ if env is None else env)
    except TunerError as exc:
        return ProcessTiming.failed(request.label, Status.RUNTIME_ERROR, str(exc))
    data = run_job("time", request.to_json(), timeout_s=request.timeout_s, scratch=scratch, env=started, spares=spares)
    if isinstance(data, NoResult):
        return ProcessTiming.failed(request.label, data.status, data.message)
    return ProcessTiming.from_json(data)
