"""Run one job in a fresh, spawned Python process with a wall-clock deadline.

A fresh interpreter (never a fork of a process that has loaded torch) isolates
crashes in generated code. The job and its result travel as JSON files.
A crash, a hang past the deadline, or a missing result become Measurement values.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tuner.trial import Measurement, Status, TrialRequest

STDERR_TAIL = 3000


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_job(kind: str, payload: dict[str, Any], *, timeout_s: float, scratch: str | None = None) -> tuple[dict | None, str]:
    """Run `python -m tuner.workers.trial_process` on one job.

    Returns (result JSON or None, failure text). None with "timeout: ..." when the
    deadline passed (the whole process group is killed), or with the exit status and
    the tail of stderr when the process died without a result.
    """
    with tempfile.TemporaryDirectory(prefix="tuner-trial-", dir=scratch) as tmp:
        job, result = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(json.dumps({"kind": kind, "request": payload}))
        with open(Path(tmp) / "stderr.txt", "w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "tuner.workers.trial_process", str(job), str(result),
                                     str(os.getpid())],
                                    stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return None, f"timeout: no result within {timeout_s:g} s; the trial process was killed"
            err.seek(0)
            tail = err.read()[-STDERR_TAIL:]
        if code == 0 and result.exists():
            return json.loads(result.read_text()), ""
        how = f"killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
        return None, f"trial process {how} before reporting a result\n{tail}"


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_isolated(request: TrialRequest, *, scratch: str | None = None) -> Measurement:
    """Measure one trial in its own process; never raises for a tuning failure."""
    data, failure = run_job("trial", request.to_json(), timeout_s=request.timeout_s, scratch=scratch)
    if data is not None:
        return Measurement.from_json(data)
    status = Status.TIMEOUT if failure.startswith("timeout:") else Status.CRASHED
    return Measurement.failed(status, failure)
