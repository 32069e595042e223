"""When a trial process ends, for whatever reason, nothing it started still runs
(workers/groups.py, lifeline.guard_group, the zygote's reaping in workers/zygote.py):
a compile the adaptive cap stopped, a child left by a trial that exited, crashed, passed its
deadline, or lost its parent, whether the trial process was spawned (cold) or forked (warm)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import MODELS, TESTS
from helpers.processes import alive
from tuner.trial import CAP_PREFIX, CompileCap, MeasureSpec, Measurement, Status, TrialRequest
from tuner.workers.caches import cache_env
from tuner.workers.isolation import run_isolated
from tuner.workers.spares import SparePool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SLOW_CXX = TESTS / "helpers" / "slow_cxx.sh"
LEAVES_A_CHILD = str(MODELS / "leaves_a_child.py")
SLEEP_S = 6         # how long slow_cxx.sh's child waits before touching its marker


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(name))
    return found


def gone(pids: list[int], timeout_s: float = 10.0) -> bool:
    """Whether every pid ends (or is a zombie) within `timeout_s`: a SIGKILL takes effect a moment later."""
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


def group_gone(pgid: int, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return group_members(pgid)


def trial_pid(measured: Measurement) -> int:
    return int(measured.worker.rpartition(":")[2])


@pytest.fixture(params=["cold", "warm"])
def spares(request: pytest.FixtureRequest, tmp_path: Path):
    """None (cold: spawned trial processes) or a pool whose spares take the trials (warm: forked)."""
    pool = SparePool(str(tmp_path / "spares")) if request.param == "warm" else None
    yield pool
    if pool is not None:
        pool.close()


def ready(pool: SparePool | None, env: dict[str, str], timeout_s: float = 120.0) -> None:
    """Fill `pool` for `env` and wait until its zygote has forked the spare (after its imports)."""
    if pool is None:
        return
    pool.fill(env)
    (spare,) = pool._spares
    deadline = time.monotonic() + timeout_s
    while spare.proc.pid is None and spare.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert spare.proc.pid is not None, "the zygote did not fork the spare"


@pytest.mark.slow
def test_a_compile_stopped_at_the_cap_goes_on_in_no_process(tmp_path: Path, spares: SparePool | None) -> None:
    """The candidate's C++ compile (slow_cxx.sh: slow for -ffp-contract=fast alone, so the default
    compile it is paired with is not) is under way when the adaptive cap stops it: once the trial
    has ended, no process of its group runs, and the compile's child never gets past its wait."""
    env = {**cache_env(str(tmp_path / "cache")), "CXX": str(SLOW_CXX), "SLOW_CXX_STARTED": str(tmp_path / "started"),
           "SLOW_CXX_MARKER": str(tmp_path / "marker"), "SLOW_CXX_SLEEP_S": str(SLEEP_S)}
    ready(spares, env)
    cap = CompileCap(seconds=3.0, p90_s=0.5, compiles=5, floor_s=3.0)
    request = TrialRequest(MeasureSpec(str(MODELS / "tiny_mlp.py"), repeat=2, warmup=1, timeout_s=300),
                           (("cpp.enable_floating_point_contract_flag", "fast"),), compile_cap=cap)
    measured = run_isolated(request, scratch=str(tmp_path), env=env, spares=spares)
    assert measured.status is Status.TIMEOUT and measured.error.startswith(CAP_PREFIX), measured.error
    assert (tmp_path / "started").exists(), "the cap fired before the slow compile began"
    assert group_gone(trial_pid(measured)) == []
    time.sleep(max(0.0, (tmp_path / "started").stat().st_mtime + SLEEP_S + 1.5 - time.time()))
    assert not (tmp_path / "marker").exists(), "a process of the trial compiled on after it ended"


def leaving_a_child(tmp_path: Path, then: str) -> dict[str, str]:
    folder = tmp_path / then
    folder.mkdir()
    return {**os.environ, "LEAVES_A_CHILD": f"{folder}:{then}"}


@pytest.mark.parametrize(("then", "status"), [("raise", Status.RUNTIME_ERROR), ("segv", Status.CRASHED),
                                              pytest.param("hang", Status.TIMEOUT, marks=pytest.mark.slow)])
def test_what_a_trial_process_started_ends_with_it(tmp_path: Path, spares: SparePool | None, then: str,
                                                   status: Status) -> None:
    """A process the trial started (leaves_a_child.py) ends with it, whether the trial process
    exited after reporting, died of SIGSEGV or was killed at its deadline."""
    env = leaving_a_child(tmp_path, then)
    ready(spares, env)
    request = TrialRequest(MeasureSpec(LEAVES_A_CHILD, timeout_s=15 if then == "hang" else 120), ())
    measured = run_isolated(request, scratch=str(tmp_path), env=env, spares=spares)
    assert measured.status is status, measured.error
    trial, child = map(int, (tmp_path / then / "pids").read_text().split())
    assert gone([trial, child]) and group_gone(trial) == []


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_what_a_trial_process_started_ends_with_it_when_its_parent_is_killed(tmp_path: Path, warm: bool) -> None:
    """A parent killed with SIGKILL (a Ray worker whose task was cancelled by force): the trial
    process dies of its parent-death signal, and its guard takes the rest of its group with it."""
    env = leaving_a_child(tmp_path, "hang")
    driver = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom tuner.trial import MeasureSpec, TrialRequest\n"
                               "from tuner.workers.isolation import run_isolated\n"
                               "from tuner.workers.spares import SparePool\n"
                               f"pool = SparePool({str(tmp_path / 'spares')!r}) if {warm} else None\n"
                               f"run_isolated(TrialRequest(MeasureSpec({LEAVES_A_CHILD!r}, timeout_s=600), ()), "
                               f"scratch={str(tmp_path)!r}, spares=pool)"],
        cwd=tmp_path, env=env)
    pids = tmp_path / "hang" / "pids"
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text()) and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        trial, child = map(int, pids.read_text().split())
        assert alive(trial) and alive(child)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    assert gone([trial, child]) and group_gone(trial) == []
