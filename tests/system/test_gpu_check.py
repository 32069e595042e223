"""bench/gpu_check.py stays ready to run, so a GPU machine's few minutes are never spent on a
broken script: its plan lists every section with a cap and the caps fit the 9-minute run; a
section past its cap is stopped and the next one still runs; its --smoke mode (CPU, toy sizes,
Triton's interpreter) runs sections end to end; the flags its search section passes get through
`tuner search`'s own checks; and its summary parser reads the table a real search prints
(tests/system/test_search.py feeds it one). Plumbing only; the GPU figures come from a real run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_main
from helpers.gpu_check import CHECK, gpu_check


def run_check(tmp_path: Path, *args: str, timeout: int = 300) -> tuple[subprocess.CompletedProcess, str]:
    """`bench/gpu_check.py ARGS` in a fresh process (no TUNER_DB), and the report it wrote to $OUT."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "OUT": str(out), "PYTHONUNBUFFERED": "1"}
    env.pop("TUNER_DB", None)
    done = subprocess.run([sys.executable, "-P", str(CHECK), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)
    report = (out / "gpu_check.txt").read_text() if (out / "gpu_check.txt").exists() else done.stdout
    return done, report


def run_smoke(tmp_path: Path, sections: str, timeout: int = 300) -> tuple[Path, str, str]:
    """`--smoke --sections SECTIONS`: its OUT folder, its report and the report's summary; fails
    the test on a non-zero exit."""
    done, report = run_check(tmp_path, "--smoke", "--sections", sections, timeout=timeout)
    assert done.returncode == 0, report[-4000:] + done.stderr[-2000:]
    return tmp_path / "out", report, report.split("== summary ==", 1)[1]


def test_the_plan_lists_every_section_with_a_cap_and_the_caps_fit_the_run(tmp_path: Path) -> None:
    # --plan runs without torch: a machine with nothing installed can show it.
    program = ("import runpy, sys\nsys.argv = ['gpu_check.py', '--plan']\ntry:\n"
               f"    runpy.run_path({str(CHECK)!r}, run_name='__main__')\nexcept SystemExit as exc:\n"
               "    assert not exc.code, exc.code\nprint('torch imported:', 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-P", "-c", program], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "torch imported: False" in done.stdout, done.stdout + done.stderr
    check = gpu_check()
    lines = done.stdout.splitlines()
    for section in check.SECTIONS:
        row = next((ln for ln in lines if ln.split()[:1] == [section.key]), None)
        assert row is not None and float(row.split()[1]) == section.cap_s > 0, (section.key, done.stdout)
        assert section.label in row and section.verifies[:40] in row, row
    total = sum(s.cap_s for s in check.SECTIONS)
    assert total + check.MARGIN_S <= check.RUN_BUDGET_S <= 9 * 60, total
    assert check.parse_args([]).budget >= total        # the default budget runs every section to its cap
    assert [s.key for s in check.SECTIONS][:5] == ["header", "search", "clock", "bare", "assert"]


def test_a_section_past_its_cap_is_stopped_and_the_next_one_runs(tmp_path: Path) -> None:
    done, report = run_check(tmp_path, "--smoke", "--sections", "locks,locks2", "--cap", "locks=2", timeout=200)
    summary = report.split("== summary ==", 1)[1]
    assert done.returncode == 1, report[-3000:]
    assert "6. measure lock on one GPU     stopped" in summary and "past its cap of 2 s" in summary, summary
    # The next section ran to an outcome of its own (not stopped); whether its stand-ins overlapped
    # depends on the node lock, which CPU tests timing in another worker hold exclusively.
    assert "10. locks across GPUs" in summary and "past its cap of 12" not in summary, summary


def test_not_tested_is_neither_ok_nor_a_failure() -> None:
    check = gpu_check()
    assert check.Outcome("10. locks across GPUs", "not tested: one GPU").passed
    assert not check.Outcome("x", "stopped: past its cap of 12 s").passed
    assert not check.Outcome("x", "failed: AssertionError").passed


@pytest.mark.slow
def test_the_gpu_check_runs_its_harvest_section_in_smoke_mode(tmp_path: Path) -> None:
    out, report, summary = run_smoke(tmp_path, "harvest")
    assert "8. Inductor harvesting         ok" in summary and "B from the database" in summary, summary
    assert "ray imported: False" in report
    assert (out / "harvest.db").exists()


@pytest.mark.slow
def test_the_gpu_check_runs_its_measurement_section_in_smoke_mode(tmp_path: Path) -> None:
    _, report, summary = run_smoke(tmp_path, "measure")
    assert "5. measurement (issue 24)      ok" in summary and "freezing passed" in summary, summary
    assert "e1 clock: skipped on CPU" in report and "e6 memory: the frozen candidate's own" in report


@pytest.mark.slow
def test_the_gpu_check_runs_its_compile_section_in_smoke_mode(tmp_path: Path) -> None:
    """A tuned kernel inside torch.compile(fullgraph=True) in a fresh process: one graph, no
    break, no benchmark (the eager process before it tuned and stored)."""
    _, report, summary = run_smoke(tmp_path, "kernels")
    assert "7. tuner.autotune compiled     ok" in summary, summary
    assert "tuner: 1 graph, 0 breaks" in summary and "0 tuner benchmarks" in summary, summary
    assert '"origin": "search", "stored": true' in report


def test_the_gpu_check_runs_its_lock_section_in_smoke_mode(tmp_path: Path) -> None:
    """Two stand-in GPUs time at once; two sections on one of them take turns."""
    _, _, summary = run_smoke(tmp_path, "locks2", timeout=120)
    assert "10. locks across GPUs          ok" in summary
    assert "2 GPU(s): sections of different GPUs overlapped" in summary


def test_the_gpu_check_runs_its_zygote_section_in_smoke_mode(tmp_path: Path) -> None:
    """The zygote's imports and a real zygote, on the CPU: nothing of CUDA, and a fork computes."""
    _, report, summary = run_smoke(tmp_path, "zygote", timeout=180)
    assert "11. zygote without CUDA        ok" in summary, summary
    assert "is_initialized False, no driver library mapped" in summary, summary
    assert "a real zygote, its spare forked, maps: nothing of CUDA" in report, report[-3000:]


@pytest.mark.parametrize("flags", ["GPU_SEARCH", "SMOKE_SEARCH"])
def test_the_search_flags_of_the_gpu_check_pass_tuner_search_checks(tmp_path: Path, flags: str) -> None:
    # The model file does not exist: a flag `tuner search` refuses would be named before it is.
    done = run_main("search", str(tmp_path / "missing.py"), "--executor", "local", *getattr(gpu_check(), flags),
                    "--db", f"sqlite:///{tmp_path / 'never.db'}")
    assert done.returncode == 1 and "missing.py" in done.stderr and "not found" in done.stderr, done.stderr
