"""bench/gpu_check.py stays ready to run: its --smoke mode (CPU, toy sizes, Triton's interpreter)
runs the harvest and search sections end to end, so a GPU machine's few minutes are never spent
on a broken script. It checks plumbing only; the GPU figures come from a real run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"


@pytest.mark.slow
def test_the_gpu_check_runs_its_harvest_and_search_sections_in_smoke_mode(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHONUNBUFFERED": "1"}
    env.pop("TUNER_DB", None)
    done = subprocess.run([sys.executable, "-P", str(CHECK), "--smoke", "--sections", "cd", "--budget", "400"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=560)
    report = (out / "gpu_check.txt").read_text()
    assert done.returncode == 0, report[-4000:] + done.stderr[-2000:]
    summary = report.split("== summary ==", 1)[1]
    assert "c. Inductor harvesting       ok" in summary and "d. tuner search + best       ok" in summary, summary
    assert "eager" in summary and "default compile" in summary and "stored:" in summary    # the search's table
    assert "ray imported: False" in report
    assert (out / "harvest.db").exists() and (out / "search.db").exists()
