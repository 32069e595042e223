"""`tuner report --profile` on a CUDA model waits for the model's own GPU, on the CUDA dry run's stand-in
machine of two GPUs (tests/helpers/cuda_dry_run.py), in a process of its own: torch.cuda.synchronize
runs for real down to its C entry point."""
from __future__ import annotations

from pathlib import Path

from helpers.dry_run_matrix import dry_run_env, run_python

TESTS = Path(__file__).resolve().parents[1]


def test_profiled_calls_wait_for_the_models_gpu_not_the_current_one(tmp_path: Path) -> None:
    """With DEVICE = "cuda:1", a bare torch.cuda.synchronize() waited for cuda:0, the current device."""
    script = ("from helpers.cuda_dry_run import calls, install\n"
              "install()\n"
              "from tuner.report.profile import _call\n"
              "_call(lambda fn: fn(), lambda: None, 2, 'cuda:1')\n"
              "print(sorted({gpu for call, gpu in calls() if call == 'synchronize'}))\n")
    done = run_python(["-c", script], TESTS, dry_run_env(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[1]"
