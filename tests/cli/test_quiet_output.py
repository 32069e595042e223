"""Plain output is short: the install step prints nothing but errors, and the read-only
commands (best, trials, explain) keep Dynamo's graph-break warnings out unless --debug.

The commands run as real subprocesses: torch's log handler writes to the stderr the process
started with, and Dynamo warns about an `.item()` once per process, so only a fresh process
shows what a user sees.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import MODELS, cli_env, run_cli
from tuner.storage import upgrade

SCALAR = str(MODELS / "scalar_item.py")
REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "scripts" / "install.sh"
WARNING = "Graph break from `Tensor.item()`"


@pytest.fixture(scope="module")
def empty_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('quiet') / 'empty.db'}"
    upgrade(url)
    return url


@pytest.mark.parametrize("command", ["trials", "best", "explain"])
def test_read_only_commands_hide_dynamo_warnings(command: str, empty_db: str, tmp_path: Path) -> None:
    done = run_cli(command, SCALAR, "--db", empty_db, cwd=tmp_path)
    assert done.returncode == (0 if command == "explain" else 1), done.stderr
    assert WARNING not in done.stderr + done.stdout
    assert "torch/_dynamo" not in done.stderr + done.stdout
    if command == "explain":       # the model does break in two: the capture itself still ran
        assert done.stdout.startswith("scalar_item: 2 graph(s), ") and done.stderr == ""
    else:
        assert len(done.stderr.splitlines()) == 1 and "; run: tuner search " in done.stderr


def test_debug_shows_dynamo_warnings(empty_db: str, tmp_path: Path) -> None:
    """The warning is real (so the test above can fail), and --debug brings it back."""
    done = run_cli("trials", SCALAR, "--db", empty_db, "--debug", cwd=tmp_path)
    assert done.returncode == 1
    assert WARNING in done.stderr


def test_install_refuses_an_unknown_extra_in_one_line(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    done = subprocess.run(["bash", str(INSTALL), "test,gpu"], env=cli_env(VENV=str(venv)), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: unknown extra 'gpu' for scripts/install.sh; choose from: "
                           "triton, postgres, test, dashboard, bench (comma-separated)\n")
    assert not venv.exists()        # refused before anything was created


@pytest.mark.slow
def test_install_prints_nothing_but_errors(tmp_path: Path) -> None:
    """A full install into a new venv (pip's upgrade, the wheel built in isolation and installed
    with its dependencies, an extra) through pip's configured index; the venv reuses this
    interpreter's packages through a .pth file, so no requirement (torch included) downloads."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = [p for p in sys.path if p.endswith("site-packages")]
    pth = next((venv / "lib").glob("python*/site-packages"))
    (pth / "_tests.pth").write_text("\n".join(site) + "\n")
    done = subprocess.run(["bash", str(INSTALL), "postgres"], env=cli_env(VENV=str(venv)), capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
    assert (venv / "bin" / "tuner").is_file()
