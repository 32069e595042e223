"""Trials that fail for real, with no injected status: a candidate that runs out of memory
under `--memory-limit`, a real Inductor compile error, and trial processes that die of
SIGSEGV or SIGKILL (tests/models/crashing_mlp.py). Each ends with every submitted trial
back exactly once."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from helpers import MODELS, cli_env, run_main
from tuner.errors import UsageError
from tuner.measure.core import out_of_memory
from tuner.trial import MeasureSpec, Measurement, Status, TrialRequest, format_mb, parse_size_mb
from tuner.workers.isolation import run_isolated
from tuner.workers.local import LocalExecutor

TINY = str(MODELS / "tiny_mlp.py")
CRASHING = MODELS / "crashing_mlp.py"
CAP_MB = 1024            # a tiny compile holds about 370 MB of data here; crashing_mlp's "oom" asks for 3 GB
# Inductor asserts that the C++ GEMM template's thread factors multiply to the thread count (1 here).
BAD_THREAD_FACTORS = (("cpp.gemm_thread_factors", "3,1,1"), ("freezing", True), ("max_autotune", True))


def crashing_model(folder: Path, fault: str) -> str:
    """A copy of crashing_mlp.py whose compiled call always has `fault` (oom, segv or kill)."""
    source = CRASHING.read_text()
    assert "\nFAULT = None\n" in source
    path = folder / f"crashing_{fault}.py"
    path.write_text(source.replace("\nFAULT = None\n", f"\nFAULT = {fault!r}\n", 1))
    return str(path)


def run_all(requests: list[TrialRequest], *, workers: int = 2) -> dict[int, Measurement]:
    """Every request through a real LocalExecutor; each must come back exactly once."""
    executor = LocalExecutor(workers=workers)
    try:
        for request in requests:
            executor.submit(request)
        results = [executor.next_result() for _ in requests]
        assert executor.pending() == 0
    finally:
        executor.close()
    numbers = [request.number for request, _ in results]
    assert sorted(numbers) == [r.number for r in requests]
    return {request.number: measurement for request, measurement in results}


def spec(path: str, **fields) -> MeasureSpec:
    return MeasureSpec(path, threads=1, repeat=3, timeout_s=120, **fields)


# -- --memory-limit: the flag -------------------------------------------------------------

def test_memory_sizes_parse_and_print_as_the_flag_takes_them() -> None:
    sizes = ("4G", "4gb", "512M", "512MB", "512", " 2 G")
    assert [parse_size_mb(t) for t in sizes] == [4096, 4096, 512, 512, 512, 2048]
    assert (format_mb(4096), format_mb(1536)) == ("4G", "1536M")
    for bad in ("lots", "4T", "-1G", "512B", ""):
        with pytest.raises(UsageError, match="--memory-limit must be a size such as 4G or 512M"):
            parse_size_mb(bad)


@pytest.mark.parametrize(("value", "message"), [
    ("lots", "--memory-limit must be a size such as 4G or 512M, got 'lots'"),
    ("100M", "--memory-limit 100M is below 512M, too little for a trial process to load torch and compile; "
             "give at least 512M, e.g. 4G"),
])
def test_a_bad_memory_limit_stops_the_search_before_any_work(tmp_path: Path, value: str, message: str) -> None:
    db = tmp_path / "never.db"
    done = run_main("search", str(tmp_path / "missing.py"), "--memory-limit", value, "--db", f"sqlite:///{db}",
                    env=cli_env())
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"error: {message}"], done.stderr
    assert not db.exists()


def test_out_of_memory_is_recognised_through_wrapping_exceptions() -> None:
    def wrapped(inner: BaseException) -> BaseException:
        try:
            try:
                raise inner
            except BaseException as exc:
                raise RuntimeError("backend compiler failed") from exc
        except RuntimeError as outer:
            return outer

    assert out_of_memory(wrapped(MemoryError()))
    assert out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
                                      "memory: you tried to allocate 3221225472 bytes."))
    assert not out_of_memory(wrapped(ValueError("mat1 and mat2 shapes cannot be multiplied")))


# -- --memory-limit: trials for real --------------------------------------------------------

def test_a_trial_past_the_memory_limit_is_crashed_and_others_run_under_it(tmp_path: Path) -> None:
    greedy = crashing_model(tmp_path, "oom")
    done = run_all([TrialRequest(spec(greedy, memory_limit_mb=CAP_MB), (), number=0),
                    TrialRequest(spec(TINY, memory_limit_mb=CAP_MB), (), number=1)])
    assert done[0].status is Status.CRASHED
    assert done[0].error.startswith("out of memory (the trial exceeded --memory-limit 1G): RuntimeError: "), done[0].error
    assert "DefaultCPUAllocator: can't allocate memory" in done[0].error.partition("\n")[0]
    assert done[1].status is Status.OK and done[1].latency_ms > 0, done[1].error


def test_a_cap_too_small_for_torch_says_so() -> None:
    """Where the cap strikes varies: Python's MemoryError (or an extension's SystemError without
    an exception set) while importing torch (the process says so itself), or the dynamic loader failing to load one of torch's libraries (the process dies,
    and its stderr says why): both read as the cap's doing."""
    from tuner.trial import out_of_memory_line

    measured = run_isolated(TrialRequest(spec(TINY, memory_limit_mb=150), ()))
    assert measured.status is Status.CRASHED
    assert measured.error in ("out of memory (the trial exceeded --memory-limit 150M) while importing torch; "
                              "raise --memory-limit",
                              "out of memory (the trial exceeded --memory-limit 150M): the trial process died "
                              "(cannot allocate memory for thread-local data: ABORT); raise --memory-limit"), measured.error
    died = "trial process exited with status 127 before reporting a result\ncannot allocate memory for thread-local data: ABORT\n"
    assert out_of_memory_line(died) == "cannot allocate memory for thread-local data: ABORT"
    assert out_of_memory_line("Traceback ...\nMemoryError\n") == "MemoryError"
    assert out_of_memory_line("trial process killed by SIGSEGV before reporting a result\n") is None


@pytest.mark.slow
def test_without_the_cap_the_greedy_candidate_runs(tmp_path: Path) -> None:
    """The crash above is the cap's doing: the same 3 GB request, never touched, passes uncapped."""
    measured = run_isolated(TrialRequest(spec(crashing_model(tmp_path, "oom")), ()))
    assert measured.status is Status.OK, measured.error


# -- real compile errors and real deaths ----------------------------------------------------

def test_a_real_inductor_compile_error_is_recorded_as_compile_error() -> None:
    measured = run_all([TrialRequest(spec(TINY), BAD_THREAD_FACTORS, number=0)], workers=1)[0]
    assert measured.status is Status.COMPILE_ERROR, measured.error
    headline = measured.error.partition("\n")[0]
    assert headline.startswith("InductorError: ") and "AssertionError" in headline, headline


def test_trial_processes_killed_by_sigsegv_or_sigkill_are_crashed(tmp_path: Path) -> None:
    done = run_all([TrialRequest(spec(crashing_model(tmp_path, "segv")), (), number=0),
                    TrialRequest(spec(crashing_model(tmp_path, "kill")), (), number=1)])
    assert done[0].status is Status.CRASHED and done[1].status is Status.CRASHED
    assert done[0].error.partition("\n")[0] == "trial process killed by SIGSEGV before reporting a result"
    assert done[1].error.partition("\n")[0] == ("trial process killed by SIGKILL (possibly out of memory) "
                                                "before reporting a result")


# -- a whole search ---------------------------------------------------------------------------

def trial_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT number, status, error FROM trials ORDER BY number").fetchall()


@pytest.mark.slow
def test_a_search_with_a_memory_limit_records_the_greedy_trial_and_completes(tmp_path: Path) -> None:
    """Trial 1 is the second trial process to load crashing_mlp.py: its plan makes it run out of memory."""
    db = tmp_path / "t.db"
    plan = f"{tmp_path / 'trial-loads'}:-,oom"
    done = run_main("search", str(CRASHING), "--trials", "3", "--repeat", "3", "--rounds", "12", "--threads", "1",
                    "--memory-limit", "1G", "--executor", "local", "--db", f"sqlite:///{db}",
                    env=cli_env(CRASHING_MLP_PLAN=plan))
    assert done.returncode == 0, done.stderr
    rows = trial_rows(db)
    assert [(number, status) for number, status, _ in rows] == [(0, "ok"), (1, "crashed"), (2, "ok")], rows
    assert rows[1][2].startswith("out of memory (the trial exceeded --memory-limit 1G)"), rows[1][2]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM best_configs").fetchone()[0] == 1    # confirmed and stored
