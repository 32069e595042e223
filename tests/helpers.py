"""Helpers shared by tests: the CLI run as a real subprocess, test model files."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MODELS = Path(__file__).parent / "models"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: no inherited TUNER_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_")}
    env.update(extra)
    return env


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m tuner ARGS` in `cwd` (never the repo root, so the installed package is used)."""
    return subprocess.run([sys.executable, "-m", "tuner", *args], cwd=cwd, env=env or cli_env(),
                          capture_output=True, text=True, timeout=timeout)
