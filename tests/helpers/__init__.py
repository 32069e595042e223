"""Helpers shared by tests: the CLI in this process or as a real subprocess, test model files.

Every builder that more than one test module uses lives in this package (`helpers.stored`,
`helpers.records`, ...); a test module never imports another test module
(scripts/import_graph.py checks it)."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

TESTS = Path(__file__).resolve().parents[1]     # tests/
REPO = TESTS.parent
MODELS = TESTS / "models"
FIXTURES = TESTS / "fixtures"


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a CLI subprocess: no inherited TUNER_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNER_")}
    env.update(extra)
    return env


def searching(args: tuple[str, ...], process_stage: bool) -> list[str]:
    """`args`, with `--no-runtime-knobs` added to a search unless `process_stage`: a search's process
    stage (runtime knobs and its claim in fresh processes) takes a minute or more of processes on 2
    cores, so only the tests of that stage run it (they pass `process_stage=True`)."""
    if args and args[0] == "search" and not process_stage and not {"--help", "--no-runtime-knobs"} & set(args):
        return [*args, "--no-runtime-knobs"]
    return list(args)


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600,
            process_stage: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m tuner ARGS` in `cwd` (never the repo root, so the installed package is used);
    a search without its process stage unless `process_stage` (`searching`)."""
    return subprocess.run([sys.executable, "-m", "tuner", *searching(args, process_stage)], cwd=cwd,
                          env=env or cli_env(), capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class Ran:
    """What a command did: its exit status and everything it printed."""

    returncode: int
    stdout: str
    stderr: str


def run_main(*args: str, env: dict[str, str] | None = None, process_stage: bool = False) -> Ran:
    """Run `tuner ARGS` in this process through `tuner.cli.main`, as `run_cli` would in a subprocess
    (a search without its process stage unless `process_stage`).

    The environment is `env` (default: `cli_env()`) while it runs; an argparse exit counts as a return.
    """
    from tuner.cli import main

    out, err = io.StringIO(), io.StringIO()
    with environment(env or cli_env()), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(searching(args, process_stage))
        except SystemExit as exc:       # argparse: exit 2 with the usage on stderr
            code = exc.code if isinstance(exc.code, int) else 1
    return Ran(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`os.environ` is exactly `env` inside the block, and what it was afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def tiny_model_and_input(seed: int):
    """tests/models/tiny_mlp.py's model in eval mode and a (8, 32) input, both from `seed`."""
    import torch

    sys.path.insert(0, str(MODELS))
    try:
        import tiny_mlp
    finally:
        sys.path.remove(str(MODELS))
    torch.manual_seed(seed)
    return tiny_mlp.get_model(), torch.randn(8, 32)


class CountingBench:
    """A Triton `do_bench(kernel_call, quantiles)`: runs the call once, counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, kernel_call: Any, quantiles: Any) -> list[float]:
        self.calls += 1
        kernel_call()
        return [1.0, 0.9, 1.1]
