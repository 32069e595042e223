"""A disk that fills up under a real `tuner search`: the search stops with one `error:` line that
names the cause and the fix, its trial in flight is killed (not waited for), nothing stored
before is lost or changed, the database passes its integrity check, and `--resume` finishes
once there is space again.

The database lives on a small tmpfs (a real file system that runs out of space; mounting needs
root). Of the two trials in flight when the disk fills, the first to load the model hangs
as it loads (before it takes any lock) and the other is just starting to compile, so its
result is the write that fails; a search that waited for its trials in flight instead of
killing them would not end for minutes.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.dbstate import dump, sqlite_integrity
from helpers import MODELS, cli_env
from helpers.processes import alive, assert_kept, trial_processes, trial_rows

pytestmark = pytest.mark.slow
SEARCH = ["--trials", "4", "--repeat", "3", "--rounds", "12", "--workers", "2", "--timeout", "300",
          "--no-runtime-knobs",
          "--executor", "local"]

HANGS_ON_THIRD_LOAD = '''
import fcntl, sys, time
if sys.argv[0].endswith("trial_process.py"):      # count the loads in trial processes
    with open({counter!r}, "a+") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)
        counter.seek(0)
        loads = len(counter.read())
        counter.write("x")
    if loads == 2:
        time.sleep(10_000)
    if loads == 3:          # the fourth is still starting when the test fills the disk, however fast it compiles
        time.sleep(5)
'''


def model_hanging_on_third_load(folder: Path) -> tuple[Path, Path]:
    """tiny_mlp.py whose third load in a trial process hangs and whose fourth waits 5 s; the model
    and its load counter."""
    counter = folder / "loads"
    model = folder / "model.py"
    model.write_text(HANGS_ON_THIRD_LOAD.format(counter=str(counter)) + (MODELS / "tiny_mlp.py").read_text())
    return model, counter


def fill(folder: Path) -> Path:
    """Fill the file system of `folder` to the last byte with a ballast file; the ballast."""
    ballast = folder / "ballast"
    with ballast.open("wb", buffering=0) as out:
        for size in (64 * 1024, 4096, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return ballast


def test_a_full_disk_stops_the_search_in_one_line_and_resume_finishes(small_disk: Path, tmp_path: Path) -> None:
    db = small_disk / "t.db"
    url = f"sqlite:///{db}"
    model, loads = model_hanging_on_third_load(tmp_path)
    env = cli_env(TUNER_DB=url)
    search = [sys.executable, "-m", "tuner", "search", str(model), *SEARCH]
    proc = subprocess.Popen(search, cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (loads.exists() and len(loads.read_text()) >= 4 and len(trial_rows(db)) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.3)
        running = trial_processes(proc.pid)            # one hangs, the other has just loaded the model
        assert len(running) == 2 and len(trial_rows(db)) == 2
        before = dump(url)
        ballast = fill(small_disk)                     # the second one's result finds the disk full
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: cannot write to database") and "no space left" in last, err[-3000:]
    assert "free space" in last and "tuner search MODEL --resume" in last, last
    assert not [pid for pid in running if alive(pid)]
    assert sqlite_integrity(db) == ["ok"]
    assert dump(url) == before                         # nothing lost, nothing half-written

    ballast.unlink()
    resumed = subprocess.run([*search, "--resume"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = trial_rows(db)
    assert len(rows) == 4 and [status for _, status, _ in rows].count("ok") >= 3, rows
    assert len({number for number, _, _ in rows}) == 4 and len({key for _, _, key in rows}) == 4
    assert_kept(before, dump(url))
    assert sqlite_integrity(db) == ["ok"]
