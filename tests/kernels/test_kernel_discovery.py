"""`tuner search` discovers the model's `@tuner.autotune` kernels and tunes them in its database.

In process: `tuner.kernels.discover_kernels` on kernels of tests/helpers/autotune_kernels.py,
defined under Triton's interpreter. Through the CLI: real searches of
tests/models/autotuned_kernel.py (its forward launches one tuned kernel), with
TRITON_INTERPRET=1 in the search's environment (its trial processes inherit it), on a fresh
SQLite file given by --db only (TUNER_DB unset, XDG_DATA_HOME in tmp: a kernel that missed
the search's database would read and write the per-user file there instead). The model's
replay timer appends each benchmarked config to KERNEL_TIMER_LOG, in every process.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers import MODELS, cli_env, run_cli

triton = pytest.importorskip("triton")
with triton.knobs.runtime.scope():
    triton.knobs.runtime.interpret = True      # kernels defined now run in the interpreter
    from helpers import autotune_kernels as kernels

import tuner  # noqa: E402
from tuner.kernels import describe_launch, discover_kernels  # noqa: E402
from tuner.storage import Store  # noqa: E402
from tuner.storage import kernel_configs  # noqa: E402

MODEL = str(MODELS / "autotuned_kernel.py")
ADD_SPACE = {"BLOCK": [16, 32, 64], "num_warps": [1, 2]}


def launch_add(kernel: Any, n: int = 100) -> bool:
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    kernel[kernels.blocks(n)](x, y, out, n)
    return torch.equal(out, x + y)


def stored_names(url: str) -> list[str]:
    with Store.open(url, readonly=True) as store:
        return [k.kernel_name for k in kernel_configs(store)]


def test_discovery_points_kernels_at_the_search_database_and_logs_each_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere.db"
    monkeypatch.setenv("TUNER_DB", f"sqlite:///{elsewhere}")      # the kernels' own default
    searched, pinned = f"sqlite:///{tmp_path / 'search.db'}", f"sqlite:///{tmp_path / 'pinned.db'}"
    timer = kernels.CountingTimer()
    free = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer)(kernels.add_kernel)
    own = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer, db=pinned)(kernels.accumulate_kernel)
    with discover_kernels(searched) as log:
        assert launch_add(free) and launch_add(free) and launch_add(free, n=300)
        own[kernels.blocks(10)](torch.zeros(10), torch.ones(10), 10)
    assert len(timer.configs) == 3 * 6
    launches = log.launches()
    assert [(x.kernel_name, dict(x.signature.key_args)["n"]) for x in launches] == [
        ("add_kernel", 100), ("add_kernel", 300), ("accumulate_kernel", 10)]
    assert all(x.choice is not None and x.choice.origin == "search" and x.choice.stored for x in launches)
    assert stored_names(searched) == ["add_kernel", "add_kernel"] and stored_names(pinned) == ["accumulate_kernel"]
    assert not elsewhere.exists()
    line = describe_launch(launches[0])
    assert line.startswith("add_kernel (n=100; x_ptr=float32,y_ptr=float32,out_ptr=float32): BLOCK=64, num_warps=2, searched 6 configs")
    assert line.endswith(", stored")

    again = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer)(kernels.add_kernel)
    with discover_kernels(searched) as log:
        assert launch_add(again)
    (hit,) = log.launches()
    assert hit.choice is not None and hit.choice.origin == "database" and len(timer.configs) == 18
    assert describe_launch(hit).endswith("BLOCK=64, num_warps=2, database hit, nothing benchmarked")
    assert launch_add(tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer)(kernels.add_kernel))
    assert elsewhere.exists() and len(timer.configs) == 24      # closed: the default database again


def test_the_float64_reference_runs_kernels_untuned_and_stores_nothing(tmp_path: Path) -> None:
    """The gate's fp64 reference launches a kernel in dtypes the user never launches: it runs
    the space's first config, and no float64 config is searched, stored or logged."""
    from tuner.kernels import untuned_launches
    from tuner.measure.verify import fp64_reference
    from tuner.workload.modelfile import LoadedModel

    url = f"sqlite:///{tmp_path / 'k.db'}"
    timer = kernels.CountingTimer()
    add = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer, db=url)(kernels.add_kernel)

    class Add(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            add[kernels.blocks(x.numel())](x, y, out, x.numel())
            return out

    x, y = torch.randn(100), torch.randn(100)
    loaded = LoadedModel(model=Add(), args=(x, y), kwargs={}, device="cpu", path=tmp_path / "add.py")
    with discover_kernels(url) as log:
        (wide,) = fp64_reference(loaded)
    assert wide.dtype == torch.float64 and torch.equal(wide, x.double() + y.double())
    assert timer.configs == [] and log.launches() == () and add.choices() == ()
    assert not (tmp_path / "k.db").exists()
    assert launch_add(add) and len(timer.configs) == 6 and stored_names(url) == ["add_kernel"]
    with untuned_launches():        # a key already chosen keeps its choice; a new one chooses nothing
        assert launch_add(add) and launch_add(add, n=300)
    assert len(timer.configs) == 6 and len(add.choices()) == 1


def search_env(tmp_path: Path, log: Path, **extra: str) -> dict[str, str]:
    return cli_env(TRITON_INTERPRET="1", KERNEL_TIMER_LOG=str(log), XDG_DATA_HOME=str(tmp_path / "xdg"), **extra)


def timer_calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def kernel_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("kernel: ")]


@pytest.mark.slow
def test_search_tunes_the_model_kernels_once_and_the_next_search_hits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    search = ("search", MODEL, "--trials", "2", "--repeat", "3", "--rounds", "12", "--executor", "local",
              "--db", url)
    first_log = tmp_path / "first.log"
    first = run_cli(*search, cwd=tmp_path, env=search_env(tmp_path, first_log))
    assert first.returncode == 0, first.stderr[-3000:]
    assert kernel_lines(first.stderr) == [
        ("kernel: shift_kernel (n=256; x_ptr=float32,shift_ptr=float32,out_ptr=float32): BLOCK=64, num_warps=1, "
         "searched 6 configs, 1.1 ms, stored")], first.stderr[-3000:]
    # Six benchmarks in the search process; the trial and confirmation processes hit the database.
    assert len(timer_calls(first_log)) == 6
    assert not (tmp_path / "xdg").exists()
    with sqlite3.connect(tmp_path / "t.db") as conn:
        statuses = conn.execute("SELECT status FROM trials ORDER BY number").fetchall()
    assert statuses == [("ok",), ("ok",)]
    assert "stored:" in first.stdout

    listed = run_cli("kernels", "--db", url, cwd=tmp_path, env=cli_env())
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith("shift_kernel")]
    assert "n=256" in row and "BLOCK=64, num_warps=1" in row and "6/6" in row

    second_log = tmp_path / "second.log"
    second = run_cli(*search, cwd=tmp_path, env=search_env(tmp_path, second_log))
    assert second.returncode == 0, second.stderr[-3000:]
    assert kernel_lines(second.stderr) == [
        ("kernel: shift_kernel (n=256; x_ptr=float32,shift_ptr=float32,out_ptr=float32): BLOCK=64, num_warps=1, "
         "database hit, nothing benchmarked")]
    assert timer_calls(second_log) == []


def test_a_kernel_that_cannot_be_tuned_is_reported_before_the_model_error(tmp_path: Path) -> None:
    log = tmp_path / "timer.log"
    out = run_cli("search", MODEL, "--trials", "2", "--executor", "local", "--db", f"sqlite:///{tmp_path / 't.db'}",
                  cwd=tmp_path, env=search_env(tmp_path, log, KERNEL_TIMER_FAIL="1"))
    assert out.returncode != 0
    (line,) = kernel_lines(out.stderr)
    assert line.startswith("kernel: shift_kernel (n=256; x_ptr=float32,shift_ptr=float32,out_ptr=float32): not tuned: TunerError: "
                           "every config of shift_kernel failed while tuning"), line
    assert "fails in eager mode" in out.stderr and len(timer_calls(log)) == 6
    assert not (tmp_path / "t.db").exists()         # nothing stored, the search stopped before its database
