"""Ctrl-C and SIGTERM: running trials are stopped and recorded as cancelled, nothing else changes,
and a resumed search measures the cancelled candidates again.

Fast: the driver over a replay executor that is interrupted while it waits, the store's
rule for cancelled rows, and the local executor killing real trial processes. Slow: real
`tuner search` subprocesses stopped by SIGINT (sent to the process group, as a terminal does)
and by SIGTERM (sent to the driver alone, as `kill` does), then resumed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import cli_env
from helpers.dbstate import dump, sqlite_integrity
from helpers.driving import replay, search, store, target  # noqa: F401  (store and target are fixtures)
from helpers.faults import FAULTY, fault_plan
from helpers.processes import alive, assert_kept, processes, trial_processes, trial_rows
from helpers.records import make_study, trial
from tuner.search import SearchInterrupted, Target
from tuner.storage import Store
from tuner.trial import ConfirmRequest, MeasureSpec, Measurement, Status, TrialRequest
from tuner.workers.local import LocalExecutor
from tuner.workers.replay import ReplayExecutor


# ------------------------------------------------------------ the driver and the store


class InterruptedWhileWaiting(ReplayExecutor):
    """Replays `results` results, then raises KeyboardInterrupt from `next_result`, as Ctrl-C
    does while the driver waits; remembers what `cancel` stopped."""

    def __init__(self, recorded, *, capacity: int, results: int):
        super().__init__(recorded, capacity=capacity)
        self.left = results
        self.stopped: list[TrialRequest] = []

    def next_result(self):
        if self.left == 0:
            raise KeyboardInterrupt
        self.left -= 1
        return super().next_result()

    def cancel(self) -> None:
        self.stopped.extend(self._pending)
        super().cancel()


def test_an_interrupt_records_the_trials_in_flight_as_cancelled_and_resume_measures_them(
        target: Target, store: Store) -> None:
    recorded = replay(target).recorded
    interrupted = InterruptedWhileWaiting(recorded, capacity=2, results=1)
    with pytest.raises(SearchInterrupted) as caught:
        search(target, store, interrupted, trials=4)
    outcome = caught.value.outcome
    assert isinstance(caught.value, KeyboardInterrupt) and not caught.value.confirming
    assert [r.number for r in outcome.trials] == [0] and outcome.trials[0].measurement.ok
    assert sorted(r.number for r in outcome.cancelled) == sorted(r.number for r in interrupted.stopped) == [1, 2]
    rows = store.trials(outcome.study.id)
    assert [(r.number, r.measurement.status) for r in rows] == [
        (0, Status.OK), (1, Status.CANCELLED), (2, Status.CANCELLED)]
    assert all("interrupted" in r.measurement.error and "--resume" in r.measurement.error for r in rows[1:])
    cancelled_keys = {r.candidate_key for r in rows[1:]}

    resumed = ReplayExecutor(recorded)
    done = search(target, store, resumed, trials=4, resume=True)
    assert done.study.id == outcome.study.id and len(done.trials) == 4 and not done.cancelled
    assert {r.candidate.key for r in resumed.submitted} >= cancelled_keys    # measured again
    assert [r.number for r in resumed.submitted] == [3, 4, 5]                 # numbers never reused
    after = store.trials(outcome.study.id)
    assert [r.number for r in after] == [0, 3, 4, 5]
    assert len({r.candidate_key for r in after}) == 4
    assert all(r.measurement.status is Status.OK for r in after)
    assert after[0] == rows[0]                                   # the row from before, unchanged


def test_cancelled_rows_give_way_to_results_and_never_replace_one(db_url: str) -> None:
    from tuner.storage import ensure_schema

    cancelled = Measurement.failed(Status.CANCELLED, "cancelled: interrupted")
    ensure_schema(db_url)
    with Store.open(db_url) as store:
        study = make_study(store)
        assert store.record_trial(study.id, replace(trial(1, "a"), measurement=cancelled))
        assert store.record_trial(study.id, trial(5, "a"))                       # same candidate
        assert [(r.number, r.candidate_key) for r in store.trials(study.id)] == [(5, "a")]
        assert not store.record_trial(study.id, replace(trial(6, "a"), measurement=cancelled))
        assert not store.record_trial(study.id, replace(trial(5, "b"), measurement=cancelled))
        assert store.record_trial(study.id, replace(trial(7, "b"), measurement=cancelled))
        assert store.record_trial(study.id, replace(trial(7, "c"), measurement=cancelled))   # same number
        assert store.record_trial(study.id, trial(8, "c"))
        assert not store.record_trial(study.id, trial(8, "d"))      # a result keeps its number
        assert not store.record_trial(study.id, trial(9, "c"))      # and its candidate
        assert [(r.number, r.candidate_key, r.measurement.status) for r in store.trials(study.id)] == [
            (5, "a", Status.OK), (8, "c", Status.OK)]


# ------------------------------------------------------------ the local executor kills its processes

HANGS_AT_LOAD = '''
import os, subprocess, time
from pathlib import Path
child = subprocess.Popen(["sleep", "600"])          # in the trial's process group, like a compile worker
Path(__file__).with_name(f"pid-{os.getpid()}-{child.pid}").touch()
time.sleep(600)
'''


HANGS_AT_LOAD_ALONE = '''
import os, time
from pathlib import Path
Path(__file__).with_name(f"pid-{os.getpid()}").touch()
time.sleep(600)
'''


def started(folder: Path, count: int, timeout_s: float = 120) -> list[int]:
    """The pids (trial processes and their children) of the first `count` loads of the model."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(folder.glob("pid-*"))
        if len(found) >= count:
            return [int(pid) for path in found for pid in path.name.split("-")[1:]]
        time.sleep(0.2)
    raise AssertionError(f"{count} trial processes did not start within {timeout_s} s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_cancel_and_close_kill_trial_and_confirmation_processes(tmp_path: Path) -> None:
    model = tmp_path / "hangs.py"
    model.write_text(HANGS_AT_LOAD)
    spec = MeasureSpec(str(model), timeout_s=600)
    executor = LocalExecutor(workers=2, scratch=str(tmp_path))
    try:
        for number in range(2):
            executor.submit(TrialRequest(spec=spec, params=(), number=number))
        pids = started(tmp_path, 2)
        start = time.monotonic()
        executor.cancel()
        assert time.monotonic() - start < 10
        assert executor.pending() == 0 and wait_gone(pids, timeout_s=5) == []    # the kernel ends them

        for path in tmp_path.glob("pid-*"):
            path.unlink()
        main = threading.main_thread()
        late: list[str] = []
        interrupted = threading.Event()

        def interrupt_once_loaded() -> None:
            try:
                started(tmp_path, 1)
            except AssertionError as exc:       # still interrupt: the test fails now, not at the 600 s timeout
                late.append(f"the confirmation process never loaded the model: {exc}")
            signal.pthread_kill(main.ident, signal.SIGINT)
            if not interrupted.wait(30):        # never seen: say why, and let the test end
                status = Path(f"/proc/self/task/{main.native_id}/status").read_text()
                late.append("SIGINT did not interrupt the main thread within 30 s: "
                            + ", ".join(line for line in status.splitlines() if line.startswith("Sig")))
                executor.close()

        interrupt = threading.Thread(target=interrupt_once_loaded)
        interrupt.start()
        raised = False
        try:
            executor.run_confirmation(ConfirmRequest(spec=spec, variants=(("default", ()),), rounds=2))
        except KeyboardInterrupt:                       # Ctrl-C while the confirmation runs here
            raised = True
        finally:
            interrupted.set()
            interrupt.join()
        assert raised and not late, "; ".join(late) or "the confirmation returned without an interrupt"
        pids = started(tmp_path, 1)
        assert all(alive(pid) for pid in pids)      # nothing stops it but close
    finally:
        executor.close()
    assert wait_gone(pids, timeout_s=5) == []
    assert not any(tmp_path.glob("tuner-local-*"))   # its scratch folder is gone


@pytest.mark.ray
def test_a_force_cancelled_ray_task_takes_its_trial_process_with_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`RayExecutor.cancel` on a cluster that stays up: Ray kills each task's worker, and the
    trial process dies with it (PDEATHSIG), not only when the cluster is shut down."""
    import shutil
    import tempfile

    from helpers.ray_cluster import auth_env
    from tuner.workers.ray_pool import RayExecutor

    ray_tmp = tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")
    for name, value in {**auth_env(), "RAY_TMPDIR": ray_tmp}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    model = tmp_path / "hangs.py"
    model.write_text(HANGS_AT_LOAD_ALONE)
    spec = MeasureSpec(str(model), timeout_s=600)
    executor = RayExecutor(workers=2)
    try:
        for number in range(2):
            executor.submit(TrialRequest(spec=spec, params=(), number=number))
        pids = started(tmp_path, 2)
        executor.cancel()
        assert executor.pending() == 0
        assert wait_gone(pids) == []
        executor.submit(TrialRequest(spec=spec, params=(), number=2))     # still usable
        assert len(started(tmp_path, 3)) == 3
    finally:
        executor.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


# ------------------------------------------------------------ real searches, stopped by a signal

SEARCH = ["--trials", "4", "--repeat", "3", "--rounds", "12", "--workers", "2", "--timeout", "300",
          "--no-runtime-knobs"]


def start_search(tmp_path: Path, env: dict[str, str], *flags: str) -> subprocess.Popen:
    """`tuner search` on faulty_mlp.py as a session of its own (so it has its own process group,
    as a shell job does), its output in files."""
    command = [sys.executable, "-m", "tuner", "search", str(FAULTY), *SEARCH, *flags]
    return subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True,
                            stdout=(tmp_path / "out.txt").open("w"), stderr=(tmp_path / "err.txt").open("w"))


def wait_until_running(proc: subprocess.Popen, db: Path, tmp_path: Path, timeout_s: float = 300) -> list[int]:
    """Wait for two stored results and two trial processes in flight that have loaded the
    model (so they hang, and later loads do not); their pids."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the search ended first: {(tmp_path / 'err.txt').read_text()[-3000:]}")
        try:
            done = [row for row in trial_rows(db) if row[1] == "ok"] if db.exists() else []
        except Exception:            # the schema is being created
            done = []
        running = trial_processes(proc.pid)
        loads = tmp_path / "loads"
        if len(done) >= 2 and len(running) >= 2 and loads.exists() and len(loads.read_text()) >= 4:
            return running
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"no two trials in flight after {timeout_s} s: {(tmp_path / 'err.txt').read_text()[-3000:]}")


def wait_gone(pids: list[int], timeout_s: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while [pid for pid in pids if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if alive(pid)]


def interrupt_then_resume(tmp_path: Path, env: dict[str, str], send, *flags: str) -> list[int]:
    """Run a search whose trials 2 and 3 hang, interrupt it with `send(driver pid)` once trials
    0 and 1 are stored, check what it printed and left, then resume it. Returns the trial
    processes' pids seen before the interrupt."""
    db = tmp_path / "t.db"
    url = f"sqlite:///{db}"
    proc = start_search(tmp_path, env, *flags)
    try:
        pids = wait_until_running(proc, db, tmp_path)
        before = dump(url)
        send(proc.pid)
        start = time.monotonic()
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            ps = subprocess.run(["ps", "-eo", "pid,ppid,sess,stat,etime,args"], capture_output=True, text=True).stdout
            mine = "\n".join(line for line in ps.splitlines() if f" {proc.pid} " in line)
            raise AssertionError(f"the search did not end within 120 s of the signal; its processes:\n{mine}\n"
                                 f"{(tmp_path / 'err.txt').read_text()[-3000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out, err = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert code == 130, err[-3000:]
    assert time.monotonic() - start < 60, "the trials in flight were not stopped at once"
    assert "interrupted after 2 of 4 trials (2 ok, 0 failed, 2 cancelled); nothing was confirmed" in out, out
    assert "latency ms" in out and "defaults" in out, out                  # the trials so far
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: interrupted;") and f"tuner search {FAULTY} --resume" in last, err[-3000:]
    assert "Traceback" not in err
    assert wait_gone(pids) == []
    rows = trial_rows(db)
    assert sorted(status for _, status, _ in rows) == ["cancelled", "cancelled", "ok", "ok"], rows
    after = dump(url)
    assert_kept(before, after)
    assert {t: r for t, r in after.items() if t != "trials"} == {t: r for t, r in before.items() if t != "trials"}
    assert sqlite_integrity(db) == ["ok"]

    resumed = subprocess.run([sys.executable, "-m", "tuner", "search", str(FAULTY), *SEARCH, "--resume",
                              "--executor", "local"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = trial_rows(db)
    results = [row for row in rows if row[1] != "cancelled"]
    assert len(results) == 4 and all(status == "ok" for _, status, _ in results), rows
    assert len({number for number, _, _ in rows}) == len(rows)
    assert len({key for _, _, key in rows}) == len(rows)
    assert_kept(before, dump(url))
    assert len(dump(url)["studies"]) == 1 and sqlite_integrity(db) == ["ok"]
    return pids


SIGNALS = {
    "ctrl-c": lambda pid: os.killpg(pid, signal.SIGINT),       # a terminal signals the whole job
    "sigterm": lambda pid: os.kill(pid, signal.SIGTERM),       # kill PID, a scheduler
}


# SIGTERM (`kill PID`) is the Ray test's signal below; the local executor is tested with Ctrl-C.
@pytest.mark.slow
def test_ctrl_c_cancels_the_trials_in_flight_and_resume_finishes(tmp_path: Path) -> None:
    env = cli_env(TUNER_DB=f"sqlite:///{tmp_path / 't.db'}",
                  FAULTY_MLP_PLAN=fault_plan(tmp_path / "loads", [None, None, "stall", "stall"]))
    interrupt_then_resume(tmp_path, env, SIGNALS["ctrl-c"], "--executor", "local")


@pytest.mark.slow
@pytest.mark.ray
def test_sigterm_under_ray_cancels_its_tasks_and_leaves_no_ray_process(tmp_path: Path) -> None:
    import tempfile

    from helpers.ray_cluster import auth_env

    ray_tmp = tempfile.mkdtemp(prefix="tuner-ray-", dir="/tmp")     # short: Ray's socket paths have a limit
    env = cli_env(TUNER_DB=f"sqlite:///{tmp_path / 't.db'}", RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0",
                  FAULTY_MLP_PLAN=fault_plan(tmp_path / "loads", [None, None, "stall", "stall"]), **auth_env())
    env.pop("RAY_ADDRESS", None)
    try:
        interrupt_then_resume(tmp_path, env, SIGNALS["sigterm"], "--executor", "ray")
        left = [pid for pid, (_, cmdline) in processes().items() if ray_tmp.encode() in cmdline]
        assert wait_gone(left) == [], [processes().get(pid) for pid in left]
    finally:
        import shutil

        shutil.rmtree(ray_tmp, ignore_errors=True)
