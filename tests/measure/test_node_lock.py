"""The measure and compile locks (`tuner.measure.node_lock`): per node on CPU, per GPU on CUDA,
in a folder of the user's own. Two GPUs are stood in for by two slot names on this CPU machine;
the real GPUs are checked by bench/gpu_check.py's sections `locks` and `locks2`. Holders run in
threads: flock locks belong to each open file, so two opens in one process exclude each other as
two processes do."""
from __future__ import annotations

import os
import stat
import tempfile
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

import pytest

from tuner.errors import TunerError
from tuner.measure.node_lock import (Slot, compile_lock, hold_for_compile, hold_for_timing, host_share, lock_folder,
                                     measure_lock)

GPU_A, GPU_B, CPU = Slot("gpu-stand-in-a"), Slot("gpu-stand-in-b"), Slot()
WAIT = 0.5      # long enough for a free lock to be taken, here


@pytest.fixture(autouse=True)
def own_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Lock files under this test's folder, never the machine's shared ones."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


class Holder:
    """Hold a lock in a thread until `release()`."""

    def __init__(self, lock: Callable[[], AbstractContextManager]) -> None:
        self.taken, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, args=(lock,), daemon=True)
        self._thread.start()

    def _run(self, lock: Callable[[], AbstractContextManager]) -> None:
        with lock():
            self.taken.set()
            self._release.wait(120)

    def release(self) -> None:
        """Let it go; a holder still waiting for its lock takes it when it is free, and lets go at once."""
        self._release.set()
        if self.taken.is_set():
            self._thread.join(10)


def can_take(lock: Callable[[], AbstractContextManager]) -> bool:
    """Whether `lock` is taken within WAIT (released at once either way)."""
    holder = Holder(lock)
    taken = holder.taken.wait(WAIT)
    holder.release()
    return taken


def test_two_gpus_time_at_once_and_one_gpu_times_alone() -> None:
    on_a = Holder(lambda: hold_for_timing(GPU_A))
    assert on_a.taken.wait(5)
    assert can_take(lambda: hold_for_timing(GPU_B))                 # the other GPU times meanwhile
    assert can_take(lambda: hold_for_compile(GPU_B))
    assert not can_take(lambda: hold_for_timing(GPU_A))             # its own GPU waits
    assert not can_take(lambda: hold_for_compile(GPU_A))            # a compile's first call runs on it
    assert not can_take(lambda: hold_for_timing(CPU))               # a CPU timing needs the whole node
    on_a.release()
    assert can_take(lambda: hold_for_timing(GPU_A))


def test_compiles_share_a_gpu_unless_one_autotunes() -> None:
    compiling = Holder(lambda: hold_for_compile(GPU_A))
    assert compiling.taken.wait(5)
    assert can_take(lambda: hold_for_compile(GPU_A))                # compiles overlap
    assert not can_take(lambda: hold_for_compile(GPU_A, autotunes=True))
    compiling.release()
    tuning = Holder(lambda: hold_for_compile(GPU_A, autotunes=True))
    assert tuning.taken.wait(5)
    assert not can_take(lambda: hold_for_compile(GPU_A))            # it benchmarks on the GPU
    assert not can_take(lambda: hold_for_timing(GPU_A))
    assert can_take(lambda: hold_for_timing(GPU_B))
    tuning.release()


def test_on_cpu_a_timed_section_holds_the_node() -> None:
    timing = Holder(measure_lock)
    assert timing.taken.wait(5)
    assert not can_take(compile_lock) and not can_take(lambda: compile_lock("cpu", {"max_autotune": True}))
    assert not can_take(lambda: hold_for_timing(GPU_A)) and not can_take(lambda: hold_for_compile(GPU_B))
    timing.release()
    compiling = Holder(compile_lock)
    assert compiling.taken.wait(5)
    assert can_take(compile_lock) and not can_take(measure_lock)
    compiling.release()


def test_a_timed_gpu_section_runs_on_its_share_of_the_host_cores() -> None:
    assert host_share(0, 2, range(8)) == {0, 1, 2, 3} and host_share(1, 2, range(8)) == {4, 5, 6, 7}
    assert host_share(2, 3, range(8)) == {4, 5, 6, 7} and host_share(3, 8, [0, 1]) == {1}
    assert host_share(0, 1, [0, 1]) == {0, 1}
    before = os.sched_getaffinity(0)
    core = min(before)
    with hold_for_timing(Slot("gpu-stand-in-a", frozenset({core}))):
        assert os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before


def test_the_lock_folder_is_the_users_own(own_temp: Path) -> None:
    with measure_lock():
        pass
    folder = lock_folder()
    assert folder.parent == own_temp and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert folder.stat().st_uid == os.getuid()
    folder.chmod(0o777)                              # left wide by another umask: narrowed again
    with compile_lock():
        pass
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_symlinked_lock_file_is_refused(own_temp: Path) -> None:
    victim = own_temp / "victim"
    victim.write_text("keep")
    (lock_folder() / "node.lock").symlink_to(victim)
    with pytest.raises(TunerError, match="node.lock"):
        with measure_lock():
            pass
    assert victim.read_text() == "keep"


def test_a_lock_folder_that_is_not_ours_is_refused(own_temp: Path) -> None:
    elsewhere = own_temp / "elsewhere"
    elsewhere.mkdir()
    (own_temp / f"tuner-locks-{os.getuid()}").symlink_to(elsewhere)       # planted where ours would be
    with pytest.raises(TunerError, match="not a folder of yours"):
        lock_folder()
    if os.getuid() == 0:                  # only root can give a folder to another user here
        folder = own_temp / f"tuner-locks-{os.getuid()}"
        folder.unlink()
        folder.mkdir(mode=0o700)
        os.chown(folder, 65534, 65534)
        with pytest.raises(TunerError, match="belongs to user 65534"):
            with measure_lock():
                pass
