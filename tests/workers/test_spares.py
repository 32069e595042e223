"""Spare trial processes (workers/spares.py): what a spare has done before its job, that a warm
trial measures as a cold one does, and that no spare outlives its pool, executor or parent."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import MODELS
from helpers.faults import faulty_model
from helpers.processes import alive
from tuner.trial import MeasureSpec, Status, TrialRequest
from tuner.workers.caches import cache_env
from tuner.workers.isolation import run_isolated
from tuner.workers.local import LocalExecutor
from tuner.workers.spares import SparePool

TINY = str(MODELS / "tiny_mlp.py")


def waiting_on_stdin(pid: int, timeout_s: float = 120.0) -> bool:
    """Whether `pid` comes to block in read(2) on fd 0 within `timeout_s` (/proc/PID/syscall: the
    call's number, then its first argument): a spare that has imported."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            return False
        number = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)
        if fields[:2] == [number, "0x0"]:
            return True
        time.sleep(0.2)
    return False


def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether `pid` ends (or is a zombie) within `timeout_s`: a SIGKILL takes effect a moment later."""
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def children(pid: int) -> list[int]:
    return [int(c) for t in os.listdir(f"/proc/{pid}/task")
            for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]


def spare_pids(pool: SparePool) -> list[int]:
    return [s.proc.pid for s in pool._spares]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_spare_has_imported_and_run_nothing_else(tmp_path: Path) -> None:
    """It blocks on its stdin with the trial code imported, no more threads than those imports start
    (a tensor op would start OpenMP's), and no child process (no compile-worker pool)."""
    pool = SparePool(str(tmp_path / "spares"))
    try:
        pool.fill(None)
        (pid,) = spare_pids(pool)
        assert waiting_on_stdin(pid)
        modules = Path(f"/proc/{pid}/maps").read_text()
        assert "libtorch_cpu" in modules
        probe = ("import importlib, os\n"
                 "from tuner.workers.trial_process import SPARE_IMPORTS, compile_imports, import_present\n"
                 "for name in SPARE_IMPORTS: importlib.import_module(name)\n"
                 "import_present(compile_imports())\n"
                 "print(len(os.listdir('/proc/self/task')))")
        imported_only = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                           check=True, cwd=tmp_path).stdout)
        assert threads(pid) == imported_only and children(pid) == []
    finally:
        pool.close()
    assert gone(pid)


def test_a_warm_trial_measures_as_a_cold_one_and_shares_the_compile_cache(tmp_path: Path) -> None:
    """The same requests, cold then warm in one cache folder: equal statuses, errors, thread counts
    and rounds; the warm one's default compile is a cache hit (the cold one filled the cache)."""
    env = cache_env(str(tmp_path / "cache"))
    pool = SparePool(str(tmp_path / "spares"))
    pool.fill(env)
    spec = MeasureSpec(TINY, warmup=1, repeat=3, min_rounds=3, timeout_s=240)
    broken = MeasureSpec(faulty_model(tmp_path, "raise"), warmup=1, repeat=3, timeout_s=240)
    try:
        results = {}
        for mode, spares in (("cold", None), ("warm", pool)):
            for name, request in (("ok", TrialRequest(spec, ())), ("raise", TrialRequest(broken, ()))):
                results[mode, name] = run_isolated(request, scratch=str(tmp_path), env=env, spares=spares)
    finally:
        pool.close()
    for name in ("ok", "raise"):
        cold, warm = results["cold", name], results["warm", name]
        assert (warm.status, warm.threads, warm.reps) == (cold.status, cold.threads, cold.reps), name
        assert (warm.error or "").partition("\n")[0] == (cold.error or "").partition("\n")[0]
        assert warm.start_s is not None and cold.start_s is not None
    assert results["warm", "ok"].status is Status.OK and results["warm", "raise"].status is Status.RUNTIME_ERROR
    assert (results["cold", "ok"].compile_cached, results["warm", "ok"].compile_cached) == (False, True)
    assert results["warm", "ok"].load_s is not None and results["warm", "ok"].measure_s is not None


def test_a_spare_of_another_environment_is_not_used(tmp_path: Path) -> None:
    """A job whose environment differs (e.g. another CUDA_VISIBLE_DEVICES) gets no spare: it starts
    cold, and the pool's one place goes to a spare of the new environment."""
    pool = SparePool(str(tmp_path / "spares"))
    first, other = dict(os.environ), {**os.environ, "CUDA_VISIBLE_DEVICES": "1"}
    try:
        pool.fill(first)
        (old,) = spare_pids(pool)
        assert pool.take(other) is None
        (new,) = spare_pids(pool)
        assert new != old and gone(old)
        assert waiting_on_stdin(new)                   # exec'd, imported: its environment is readable
        assert b"CUDA_VISIBLE_DEVICES=1\0" in Path(f"/proc/{new}/environ").read_bytes()
        spare = pool.take(other)
        assert spare is not None and spare.proc.pid == new
        spare.kill()
    finally:
        pool.close()


def test_cancel_and_close_kill_the_spares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """...and the executor's spares compile into its search's cache folder, which goes at close."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)    # the suite names one (tests/conftest.py)
    executor = LocalExecutor(workers=1, scratch=str(tmp_path))
    try:
        (first,) = spare_pids(executor._spares)
        assert waiting_on_stdin(first)
        environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{first}/environ").read_bytes().split(b"\0") if v)
        assert environ[b"TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path).encode())
        assert environ[b"TRITON_CACHE_DIR"].startswith(str(tmp_path).encode())
        executor.cancel()
        assert gone(first)
        executor._spares.fill(executor._env)
        (second,) = spare_pids(executor._spares)
    finally:
        executor.close()
    assert gone(second) and not os.listdir(tmp_path)


def test_a_spare_dies_with_its_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\nfrom tuner.workers.spares import SparePool\n"
                               f"pool = SparePool({str(tmp_path)!r})\npool.fill(None)\n"
                               "print(json.dumps([s.proc.pid for s in pool._spares]), flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        (spare,) = json.loads(parent.stdout.readline())
        assert alive(spare)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert gone(spare)
