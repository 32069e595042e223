"""A zygote that misbehaves (workers/zygote.py, workers/spares.py): one whose stdout carries a
stray line, one whose imports fail, one that never forks; and the folders of a process that made
its own pool of spares and was killed with SIGKILL (workers/scratch.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from helpers import MODELS
from helpers.site_hooks import FAILING_ZYGOTE, PRINTS_A_BLANK_LINE, STUCK_ZYGOTE, hooked_env
from tuner.trial import MeasureSpec, Status, TrialRequest
from tuner.workers import spares
from tuner.workers.isolation import run_isolated
from tuner.workers.spares import SparePool, SparesOff

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A job that costs no compile: the trial records the model's own error (a runtime error).
QUICK = TrialRequest(MeasureSpec(str(MODELS / "bad_get_model_raises.py"), timeout_s=120), ())


def test_a_stray_line_on_the_zygotes_stdout_leaves_its_protocol_alone(tmp_path: Path) -> None:
    """A site hook that prints a blank line in every process: the zygote still forks, and the
    job runs in its spare (the trial's pid is the spare's)."""
    env = hooked_env(tmp_path / "hook", PRINTS_A_BLANK_LINE)
    pool = SparePool(str(tmp_path / "spares"))
    try:
        pool.fill(env)
        (spare,) = pool._spares
        deadline = time.monotonic() + 120
        while spare.proc.pid is None and spare.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert spare.proc.pid is not None, "the zygote did not fork the spare (or we did not hear of it)"
        measured = run_isolated(QUICK, scratch=str(tmp_path), env=env, spares=pool)
    finally:
        pool.close()
    assert measured.status is Status.RUNTIME_ERROR, measured.error
    assert measured.worker.endswith(f":{spare.proc.pid}")


def test_a_zygote_that_cannot_import_turns_spares_off_once_saying_why(tmp_path: Path) -> None:
    """Its jobs run cold, and one SparesOff warning carries the end of its stderr (its ModuleNotFoundError)."""
    env = hooked_env(tmp_path / "hook", FAILING_ZYGOTE)
    pool = SparePool(str(tmp_path / "spares"))
    try:
        pool.fill(env)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = [run_isolated(QUICK, scratch=str(tmp_path), env=env, spares=pool) for _ in range(2)]
            assert pool.take(env) is None       # spares are off for this environment
    finally:
        pool.close()
    assert [m.status for m in results] == [Status.RUNTIME_ERROR] * 2, [m.error for m in results]
    said = [str(w.message) for w in caught if issubclass(w.category, SparesOff)]
    assert len(said) == 1, said
    assert said[0].startswith("spare trial processes are off: their zygote exited with status 1 before forking any")
    assert "ModuleNotFoundError: import of torch._inductor.compile_fx halted; None in sys.modules" in said[0], said[0]


def test_a_spare_never_forked_costs_its_job_one_timeout_not_two(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A zygote stuck in its imports: the job it took ends at its deadline (not rerun cold with a
    fresh one), as a TIMEOUT saying the spare was never forked. A zygote that young may be
    importing still, and is left alone; once it is STUCK_S old (made 0 here), the next such job
    has it killed, and spares are off for that environment, with one warning."""
    env = hooked_env(tmp_path / "hook", STUCK_ZYGOTE)
    pool = SparePool(str(tmp_path / "spares"))
    request = TrialRequest(MeasureSpec(QUICK.spec.model_path, timeout_s=2), ())
    try:
        pool.fill(env)
        (zygote,) = pool._zygotes.values()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            began = time.monotonic()
            young = run_isolated(request, scratch=str(tmp_path), env=env, spares=pool)
            took = time.monotonic() - began
            assert zygote.alive() and not [w for w in caught if issubclass(w.category, SparesOff)]
            monkeypatch.setattr(spares, "STUCK_S", 0.0)
            old = run_isolated(request, scratch=str(tmp_path), env=env, spares=pool)
        assert pool.take(env) is None
    finally:
        pool.close()
    for measured in (young, old):
        assert measured.status is Status.TIMEOUT and "was never forked" in measured.error, measured.error
    assert took < 2 * 2, f"the job took {took:.1f} s of its 2 s timeout"
    assert zygote.proc.returncode == -signal.SIGKILL
    said = [str(w.message) for w in caught if issubclass(w.category, SparesOff)]
    assert len(said) == 1 and "their zygote forked no spare in " in said[0], said


def test_the_folders_of_a_process_killed_with_its_spares_are_removed_by_the_next(tmp_path: Path) -> None:
    """A process that made its pool of spares (as a Ray worker does) is killed with SIGKILL, which
    runs no exit handler: the next process to make its own folder on the machine removes the
    dead one's, and leaves a live owner's alone."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    owner = ("import os, tempfile, time\nfrom tuner.workers.spares import process_spares\n"
             "pool = process_spares()\npool.fill(None)\n"
             "while pool._spares[0].proc.pid is None: time.sleep(0.1)\n"
             "print(pool.root, flush=True)\ntime.sleep(600)")
    procs = []
    try:
        roots = []
        for _ in range(2):      # one after the other: the second one's sweep leaves the first one's alone
            procs.append(subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True,
                                          cwd=tmp_path, env=env))
            roots.append(Path(procs[-1].stdout.readline().strip()))
        folders = [root.parent for root in roots]
        assert all(folder.parent == tmp_path and folder.name.startswith("tuner-proc-") for folder in folders)
        assert all(root.is_dir() for root in roots)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        assert folders[0].exists()      # no exit handler ran
        subprocess.run([sys.executable, "-c", "from tuner.workers.scratch import process_folder\nprocess_folder()"],
                       check=True, cwd=tmp_path, env=env)
        assert not folders[0].exists() and folders[1].exists()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
