"""Spare trial processes (workers/spares.py, workers/zygote.py): what a zygote and its spares have
done before a job, that a fork computes and times as a spawned process does and a warm trial
measures as a cold one does, and that no zygote or spare outlives its pool, executor or parent."""
from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import MODELS, TESTS
from helpers.faults import faulty_model
from helpers.processes import alive
from tuner.trial import MeasureSpec, Status, TrialRequest
from tuner.workers.caches import cache_env
from tuner.workers.isolation import run_isolated
from tuner.workers.local import LocalExecutor
from tuner.workers.spares import Spare, SparePool
from tuner.workers.trial_process import cpu_only_torch
from tuner.workers.zygote import JOB_FIFO

TINY = str(MODELS / "tiny_mlp.py")


def forked(spare: Spare, timeout_s: float = 120.0) -> int:
    """The pid of `spare` once its zygote has forked it (after the zygote's imports)."""
    deadline = time.monotonic() + timeout_s
    while spare.proc.pid is None and spare.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert spare.proc.pid is not None, "the zygote did not fork the spare"
    return spare.proc.pid


def waiting_for_job(pid: int, timeout_s: float = 30.0) -> bool:
    """Whether `pid` comes to block in read(2) on its job FIFO within `timeout_s` (/proc/PID/syscall:
    the call's number, then its first argument, the descriptor)."""
    deadline = time.monotonic() + timeout_s
    number = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)
    while time.monotonic() < deadline:
        try:
            fields = Path(f"/proc/{pid}/syscall").read_text().split()
            if fields[0] == number and os.readlink(f"/proc/{pid}/fd/{int(fields[1], 16)}").endswith(JOB_FIFO):
                return True
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.1)
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


def zygote_pids(pool: SparePool) -> list[int]:
    return [z.proc.pid for z in pool._zygotes.values()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_zygote_has_only_imported_and_primed_and_its_spare_waits_for_a_job(tmp_path: Path) -> None:
    """The zygote has the trial code imported (on a CPU-only torch, the CPU patterns registered too:
    symbolic traces), no more threads than those imports start (a tensor op would start OpenMP's;
    OpenBLAS's idle server, which they start, stops at each fork and starts again only when used;
    the tqdm monitor the pattern registration starts is stopped), and no child but its spare (no
    compile-worker pool); the spare, its fork, waits on its job FIFO with torch loaded and no thread
    but its own (OpenBLAS's idle server stops at a fork and starts again at its first use)."""
    pool = SparePool(str(tmp_path / "spares"))
    try:
        pool.fill(None)
        (zygote,), (spare,) = zygote_pids(pool), pool._spares
        pid = forked(spare)
        assert waiting_for_job(pid)
        assert "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()
        probe = ("import importlib, os\n"
                 "from tuner.workers.trial_process import SPARE_IMPORTS, compile_imports, import_present\n"
                 "for name in SPARE_IMPORTS: importlib.import_module(name)\n"
                 "import_present(compile_imports())\n"
                 "print(len(os.listdir('/proc/self/task')))")
        imported_only = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                           check=True, cwd=tmp_path).stdout)
        assert threads(zygote) <= imported_only and children(zygote) == [pid]   # a fork stops OpenBLAS's
        assert threads(pid) == 1 and children(pid) == []
    finally:
        pool.close()
    assert gone(zygote) and gone(pid)


class Timings:
    """The test's end of fork_probe.serve_timings in `folder`: ask for one block of timings."""

    def __init__(self, folder: Path):
        folder.mkdir()
        for name in ("go.fifo", "done.fifo"):
            os.mkfifo(folder / name)
        self.folder = folder
        self.go = os.open(folder / "go.fifo", os.O_RDWR)        # O_RDWR: opening waits for no one
        self.done = os.open(folder / "done.fifo", os.O_RDWR)

    def block(self, timeout_s: float = 120.0) -> float:
        os.write(self.go, b"time\n")
        assert select.select([self.done], [], [], timeout_s)[0], f"no timings from {self.folder}"
        return float(os.read(self.done, 100).decode())

    def stop(self) -> None:
        os.write(self.go, b"stop\n")


def facts_of(folder: Path, timeout_s: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while not (folder / "facts.json").exists():
        assert time.monotonic() < deadline, f"no facts from {folder}"
        time.sleep(0.2)
    return json.loads((folder / "facts.json").read_text())


def test_a_fork_computes_and_times_as_a_spawned_process(tmp_path: Path) -> None:
    """The same work after the same imports, in a fork of a zygote and in a spawned process (each
    with its own compile cache, so both compile for real): the same output bytes, OpenMP and OS
    thread counts (a fork without OpenMP's pool would run the matmul on one core), compile
    workers, resident memory a call adds (within 1 MiB of 16), and timings: blocks of calls taking
    turns between the two processes, their median ratio within 2x (the other half of the suite
    shares these 2 cores), the pattern matcher's registrations (once, before the compile on a
    CPU-only torch: `trial_process._cpu_patterns`); Python's `random` and torch's seed differ
    between two forks, as between two spawned processes."""
    probe = [sys.executable, str(TESTS / "helpers" / "fork_probe.py")]
    timings = {name: Timings(tmp_path / name) for name in ("spawned", "fork1", "fork2")}
    spawned = subprocess.Popen([*probe, "spawned", str(tmp_path / "spawned")], cwd=tmp_path, start_new_session=True,
                               env=cache_env(str(tmp_path / "cache-spawned")))
    zygote = subprocess.Popen([*probe, "zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=tmp_path, env=cache_env(str(tmp_path / "cache-forked")), start_new_session=True)
    try:
        facts = {"spawned": facts_of(tmp_path / "spawned")}
        for name in ("fork1", "fork2"):
            zygote.stdin.write(f"fork {tmp_path / name}\n")
            zygote.stdin.flush()
            verb, pid = zygote.stdout.readline().split()
            assert verb == "forked"
            facts[name] = facts_of(tmp_path / name)
        ratios = []
        for turn in range(12):
            order = ("spawned", "fork1") if turn % 2 else ("fork1", "spawned")
            block = {name: timings[name].block() for name in order}
            ratios.append(block["fork1"] / block["spawned"])
        for timing in timings.values():
            timing.stop()
        assert spawned.wait(timeout=30) == 0
        zygote.stdin.close()
        assert zygote.wait(timeout=30) == 0
    finally:
        for proc in (spawned, zygote):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    same = ("output", "torch_threads", "os_threads", "compile_workers", "compile_threads", "pattern_inits")
    assert {k: facts["fork1"][k] for k in same} == {k: facts["spawned"][k] for k in same}
    # The patterns registered once (by the zygote on a CPU-only torch, a hit for the compile; else by the compile)
    assert [misses for _, misses in facts["fork1"]["pattern_inits"]] == [1, 1], facts
    if cpu_only_torch():
        assert all(hits >= 1 for hits, _ in facts["fork1"]["pattern_inits"]), facts
    assert abs(facts["fork1"]["peak_mb"] - facts["spawned"]["peak_mb"]) <= 1, facts     # a 16 MiB tensor
    assert 0.5 < statistics.median(ratios) < 2.0, ratios
    for seeded in ("random", "torch_seed"):     # from the OS in every process, forked or not
        assert facts["fork1"][seeded] != facts["fork2"][seeded]


def test_a_warm_trial_measures_as_a_cold_one_and_shares_the_compile_cache(tmp_path: Path) -> None:
    """The same requests, spawned (cold) and forked (warm) in turn in one cache folder: equal
    statuses, errors, thread counts, rounds and memory; the first warm one's default compile is a
    cache hit (the cold one filled the cache). Timings are compared in the test above, where the
    two processes take turns: a trial's latency under the other half of the suite's load swings
    200x (0.04 against 8 ms, either way round)."""
    env = cache_env(str(tmp_path / "cache"))
    pool = SparePool(str(tmp_path / "spares"))
    pool.fill(env)
    spec = MeasureSpec(TINY, warmup=1, repeat=3, min_rounds=3, timeout_s=240)
    broken = MeasureSpec(faulty_model(tmp_path, "raise"), warmup=1, repeat=3, timeout_s=240)
    try:
        results: dict[tuple[str, str], list] = {}
        for rounds, name, request in ((2, "ok", TrialRequest(spec, ())), (1, "raise", TrialRequest(broken, ()))):
            for _ in range(rounds):
                for mode, spares in (("cold", None), ("warm", pool)):
                    measured = run_isolated(request, scratch=str(tmp_path), env=env, spares=spares)
                    results.setdefault((mode, name), []).append(measured)
    finally:
        pool.close()
    for name in ("ok", "raise"):
        for cold, warm in zip(results["cold", name], results["warm", name]):
            assert (warm.status, warm.threads, warm.reps) == (cold.status, cold.threads, cold.reps), name
            assert (warm.error or "").partition("\n")[0] == (cold.error or "").partition("\n")[0]
            assert warm.start_s is not None and cold.start_s is not None
    oks = {mode: results[mode, "ok"] for mode in ("cold", "warm")}
    assert all(m.status is Status.OK for m in oks["warm"])
    assert all(m.status is Status.RUNTIME_ERROR for m in results["warm", "raise"])
    assert {round(m.peak_mem_mb or 0) for m in oks["warm"]} == {round(m.peak_mem_mb or 0) for m in oks["cold"]}
    assert (oks["cold"][0].compile_cached, oks["warm"][0].compile_cached) == (False, True)
    assert oks["warm"][0].load_s is not None and oks["warm"][0].measure_s is not None


def test_a_spare_of_another_environment_is_not_used(tmp_path: Path) -> None:
    """A job whose environment differs (e.g. another CUDA_VISIBLE_DEVICES) gets no spare: it starts
    cold, the old zygote goes, and a zygote of the new environment forks the pool's spare."""
    pool = SparePool(str(tmp_path / "spares"))
    first, other = dict(os.environ), {**os.environ, "CUDA_VISIBLE_DEVICES": "1"}
    try:
        pool.fill(first)
        (old,), (old_spare,) = zygote_pids(pool), pool._spares
        forked(old_spare)
        assert pool.take(other) is None
        (new,), (new_spare,) = zygote_pids(pool), pool._spares
        assert new != old and gone(old) and gone(old_spare.proc.pid)
        pid = forked(new_spare)
        assert b"CUDA_VISIBLE_DEVICES=1\0" in Path(f"/proc/{pid}/environ").read_bytes()
        spare = pool.take(other)
        assert spare is not None and spare.proc.pid == pid
        spare.discard()      # let go unused: it reads the end of its FIFO and exits
        assert gone(pid)
    finally:
        pool.close()


def test_cancel_and_close_kill_the_spares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """...zygote and spare alike; and the executor's zygote compiles into its search's cache
    folder, which goes at close."""
    # As torch leaves it once the driver has used Inductor's cache: its own default, which is not the user's choice
    from tuner.workers.caches import inductor_default_folder

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", inductor_default_folder())
    executor = LocalExecutor(workers=1, scratch=str(tmp_path))
    try:
        (first,), (spare,) = zygote_pids(executor._spares), executor._spares._spares
        first_spare = forked(spare)
        environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{first}/environ").read_bytes().split(b"\0") if v)
        assert environ[b"TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path).encode())
        assert environ[b"TRITON_CACHE_DIR"].startswith(str(tmp_path).encode())
        executor.cancel()
        assert gone(first) and gone(first_spare)
        executor._spares.fill(executor._env)
        (second,), (spare,) = zygote_pids(executor._spares), executor._spares._spares
        second_spare = forked(spare)
    finally:
        executor.close()
    assert gone(second) and gone(second_spare) and not os.listdir(tmp_path)


def test_a_spare_dies_with_its_parent(tmp_path: Path) -> None:
    """The zygote dies with the process that started it, and its spare with the zygote."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\nfrom tuner.workers.spares import SparePool\n"
                               f"pool = SparePool({str(tmp_path)!r})\npool.fill(None)\n"
                               "(zygote,), (spare,) = pool._zygotes.values(), pool._spares\n"
                               "while spare.proc.pid is None: time.sleep(0.1)\n"
                               "print(json.dumps([zygote.proc.pid, spare.proc.pid]), flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        zygote, spare = json.loads(parent.stdout.readline())
        assert alive(zygote) and alive(spare)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert gone(zygote) and gone(spare)
