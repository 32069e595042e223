"""bench/gpu_check.py stays ready to run, so a GPU machine's few minutes are never spent on a
broken script: its --smoke mode (CPU, toy sizes, Triton's interpreter) runs the harvest section
end to end; the flags its search section passes get through `tuner search`'s own checks; and
its summary parser reads the table a real search prints (tests/system/test_search.py feeds it one).
Plumbing only; the GPU figures come from a real run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_main
from helpers.gpu_check import CHECK, gpu_check


def run_smoke(tmp_path: Path, section: str, budget: int) -> tuple[Path, str, str]:
    """`bench/gpu_check.py --smoke --sections SECTION` in a fresh process (no TUNER_DB): its OUT
    folder, its report and the report's summary; fails the test on a non-zero exit."""
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHONUNBUFFERED": "1"}
    env.pop("TUNER_DB", None)
    done = subprocess.run([sys.executable, "-P", str(CHECK), "--smoke", "--sections", section, "--budget", str(budget)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=budget + 100)
    report = (out / "gpu_check.txt").read_text()
    assert done.returncode == 0, report[-4000:] + done.stderr[-2000:]
    return out, report, report.split("== summary ==", 1)[1]


@pytest.mark.slow
def test_the_gpu_check_runs_its_harvest_section_in_smoke_mode(tmp_path: Path) -> None:
    out, report, summary = run_smoke(tmp_path, "c", 300)
    assert "c. Inductor harvesting       ok" in summary and "B from the database" in summary, summary
    assert "ray imported: False" in report
    assert (out / "harvest.db").exists()


@pytest.mark.slow
def test_the_gpu_check_runs_its_measurement_section_in_smoke_mode(tmp_path: Path) -> None:
    _, report, summary = run_smoke(tmp_path, "e", 300)
    assert "e. measurement (issue 24)    ok" in summary and "freezing passed" in summary, summary
    assert "e1 clock: skipped on CPU" in report and "e6 memory: the frozen candidate's own" in report


@pytest.mark.slow
def test_the_gpu_check_runs_its_compile_section_in_smoke_mode(tmp_path: Path) -> None:
    """A tuned kernel inside torch.compile(fullgraph=True) in a fresh process: one graph, no
    break, no benchmark (the eager process before it tuned and stored)."""
    _, report, summary = run_smoke(tmp_path, "k", 300)
    assert "k. tuner.autotune compiled   ok" in summary, summary
    assert "tuner: 1 graph, 0 breaks" in summary and "0 tuner benchmarks" in summary, summary
    assert '"origin": "search", "stored": true' in report


def test_the_gpu_check_runs_its_lock_section_in_smoke_mode(tmp_path: Path) -> None:
    """Two stand-in GPUs time at once; two sections on one of them take turns."""
    _, _, summary = run_smoke(tmp_path, "l", 120)
    assert "l. a measure lock per GPU" in summary and "2 GPU(s): sections of different GPUs overlapped" in summary


@pytest.mark.parametrize("flags", ["GPU_SEARCH", "SMOKE_SEARCH"])
def test_the_search_flags_of_the_gpu_check_pass_tuner_search_checks(tmp_path: Path, flags: str) -> None:
    # The model file does not exist: a flag `tuner search` refuses would be named before it is.
    done = run_main("search", str(tmp_path / "missing.py"), "--executor", "local", *getattr(gpu_check(), flags),
                    "--db", f"sqlite:///{tmp_path / 'never.db'}")
    assert done.returncode == 1 and "missing.py" in done.stderr and "not found" in done.stderr, done.stderr


