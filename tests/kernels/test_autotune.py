"""`tuner.autotune` on CPU, under Triton's interpreter, against real SQLite files.

The kernels live in tests/helpers/autotune_kernels.py and are defined with the interpreter on.
Timers are replay timers (tests/autotune_kernels.CountingTimer and the ones below): they
launch each config once, so results can be checked, and report a latency per config.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tuner.errors import UsageError
from tuner.kernels.search import search_configs
from tuner.trial import Measurement, Status

triton = pytest.importorskip("triton")
with triton.knobs.runtime.scope():
    triton.knobs.runtime.interpret = True      # kernels defined now run in the interpreter
    from helpers import autotune_kernels as kernels

import tuner  # noqa: E402
from tuner.kernels import KernelWarning  # noqa: E402
from tuner.storage import Store  # noqa: E402
from tuner.storage import kernel_configs  # noqa: E402

HERE = Path(__file__).resolve().parents[1] / "helpers"   # autotune_kernels.py
ADD_SPACE = {"BLOCK": [16, 32, 64, 128], "num_warps": [1, 2, 4]}


def add(kernel: Any, n: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    kernel[kernels.blocks(n)](x, y, out, n)
    return out, x + y


def test_every_config_of_the_space_gives_eager_results(sqlite_url: str) -> None:
    torch.manual_seed(0)
    n = 100
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    checked: list[tuple[dict[str, Any], bool]] = []

    def timer(launch: Any, config: Any) -> float:
        out.fill_(float("nan"))
        launch()
        checked.append((dict(config), torch.equal(out, x + y)))
        return 1.0

    kernel = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer, db=sqlite_url)(kernels.add_kernel)
    kernel[kernels.blocks(n)](x, y, out, n)
    assert [c for c, _ in checked] == [kernel.stored_form(c) for c in kernel.configs] and len(checked) == 12
    assert all(ok for _, ok in checked)
    assert torch.equal(out, x + y)


def test_every_matmul_config_matches_torch(sqlite_url: str) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(40, 24), torch.randn(24, 36)
    results: list[bool] = []

    class Checking(kernels.CountingTimer):
        def __call__(self, launch: Any, config: Any) -> float:
            latency = super().__call__(launch, config)
            results.append(bool(torch.allclose(c_out[0], a @ b, atol=1e-4, rtol=1e-4)))
            return latency

    c_out: list[torch.Tensor] = []
    kernel = tuner.autotune(space=kernels.MATMUL_SPACE, key=["M", "N", "K"],
                            constraint=kernels.matmul_constraint, timer=Checking(),
                            db=sqlite_url)(kernels.matmul_kernel)
    (M, K), (_, N) = a.shape, b.shape
    c = torch.full((M, N), float("nan"))
    c_out.append(c)
    kernel[lambda m: (triton.cdiv(M, m["BLOCK_M"]), triton.cdiv(N, m["BLOCK_N"]))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    assert len(results) == len(kernel.configs) == 12 and all(results)
    assert torch.allclose(c, a @ b, atol=1e-4, rtol=1e-4)


def run_second_process(db_url: str, result: Path) -> dict[str, Any]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(HERE / "autotune_kernels.py"), db_url, str(result)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(result.read_text())


def test_miss_then_hit_across_two_processes(sqlite_url: str, tmp_path: Path) -> None:
    first = run_second_process(sqlite_url, tmp_path / "first.json")
    assert first["origin"] == "search" and first["stored"] and first["correct"]
    assert first["timer_calls"] == 12                       # exhaustive over the pruned space
    assert first["config"] == {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 4}
    second = run_second_process(sqlite_url, tmp_path / "second.json")
    assert second["timer_calls"] == 0 and second["origin"] == "database" and second["correct"]
    assert (second["config"], second["kernel_key"]) == (first["config"], first["kernel_key"])
    with Store.open(sqlite_url, readonly=True) as store:
        (row,) = kernel_configs(store)
    assert (row.kernel_name, row.kernel_key, row.config_dict()) == (
        "matmul_kernel", first["kernel_key"], first["config"])
    assert (row.configs_tried, row.space_size, dict(row.key_args)) == (12, 12, {"M": 40, "N": 36, "K": 24})
    assert row.dtypes == "a_ptr=float32,b_ptr=float32,c_ptr=float32"


def test_a_hit_in_process_benchmarks_nothing(sqlite_url: str) -> None:
    first = kernels.CountingTimer()
    out, expected = add(tuner.autotune(space=ADD_SPACE, key=["n"], timer=first, db=sqlite_url)(
        kernels.add_kernel))
    assert len(first.configs) == 12 and torch.equal(out, expected)
    again = kernels.CountingTimer()
    kernel = tuner.autotune(space=ADD_SPACE, key=["n"], timer=again, db=sqlite_url)(kernels.add_kernel)
    out, expected = add(kernel)
    assert again.configs == [] and torch.equal(out, expected)
    assert [c.origin for c in kernel.choices()] == ["database"]
    out, expected = add(kernel, n=300)                       # another key: a miss
    assert len(again.configs) == 12 and torch.equal(out, expected)


def test_the_constraint_prunes_before_any_launch(sqlite_url: str) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    def constraint(config: dict[str, Any]) -> bool:
        events.append(("constraint", dict(config)))
        return config["BLOCK"] * config["num_warps"] <= 64

    def timer(launch: Any, config: Any) -> float:
        events.append(("launch", dict(config)))
        launch()
        return float(config["BLOCK"])

    kernel = tuner.autotune(space=ADD_SPACE, key=["n"], constraint=constraint, timer=timer,
                            db=sqlite_url)(kernels.add_kernel)
    out, expected = add(kernel)
    kinds = [kind for kind, _ in events]
    assert kinds == ["constraint"] * 12 + ["launch"] * 6
    launched = [c for kind, c in events if kind == "launch"]
    assert all(c["BLOCK"] * c["num_warps"] <= 64 for c in launched)
    assert torch.equal(out, expected) and kernel.stored_form(kernel.best_config) == {"BLOCK": 16, "num_warps": 1}

    events.clear()
    with pytest.raises(UsageError, match="rejects all 12 combinations"):    # at decoration, as Triton checks
        tuner.autotune(space=ADD_SPACE, key=["n"], constraint=lambda c: False, timer=timer,
                       db=sqlite_url)(kernels.add_kernel)
    assert events == []


def accumulate(restore: bool, db_url: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    timer = kernels.CountingTimer()
    kernel = tuner.autotune(space=ADD_SPACE, key=["n"], restore_value=["acc_ptr"] if restore else None,
                            timer=timer, db=db_url)(kernels.accumulate_kernel)
    n = 100
    acc, x = torch.randn(n), torch.randn(n)
    expected = acc + x
    kernel[kernels.blocks(n)](acc, x, n)
    return acc, expected, len(timer.configs)


def test_restore_value_keeps_in_place_outputs_right(tmp_path: Path) -> None:
    acc, expected, launches = accumulate(True, f"sqlite:///{tmp_path / 'a.db'}")
    assert launches == 12 and torch.allclose(acc, expected)
    acc, expected, _ = accumulate(False, f"sqlite:///{tmp_path / 'b.db'}")   # the corruption guarded
    assert not torch.allclose(acc, expected)


def test_reset_to_zero_zeroes_before_each_benchmark_and_the_launch(tmp_path: Path) -> None:
    n = 1000
    x = torch.randn(n)
    for reset, db in ((["total_ptr"], "a.db"), (None, "b.db")):
        timer = kernels.CountingTimer()
        kernel = tuner.autotune(space={"BLOCK": [128, 256, 512]}, key=["n"], reset_to_zero=reset,
                                timer=timer, db=f"sqlite:///{tmp_path / db}")(kernels.atomic_add_kernel)
        total = torch.zeros(n)
        kernel[kernels.blocks(n)](x, total, n)
        launches = len(timer.configs) + 1
        assert launches == 4
        assert torch.allclose(total, x if reset else launches * x), reset


def test_a_corrupt_database_warns_once_and_results_stay_right(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    junk = os.urandom(8192)
    path.write_bytes(junk)
    timer = kernels.CountingTimer()
    kernel = tuner.autotune(space=ADD_SPACE, key=["n"], timer=timer, db=f"sqlite:///{path}")(
        kernels.add_kernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (100, 300):
            out, expected = add(kernel, n)
            assert torch.equal(out, expected)
    messages = [str(w.message) for w in caught if issubclass(w.category, KernelWarning)]
    assert len(messages) == 1 and "not a SQLite database" in messages[0], messages
    assert len(timer.configs) == 24 and path.read_bytes() == junk
    assert [(c.origin, c.stored) for c in kernel.choices()] == [("search", False)] * 2


def test_optuna_searches_a_large_space_under_the_budget(sqlite_url: str) -> None:
    space = {"BLOCK": [16, 32, 64, 128, 256], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2, 3]}
    timer = kernels.CountingTimer()
    kernel = tuner.autotune(space=space, key=["n"], constraint=lambda c: c["BLOCK"] * c["num_warps"] <= 256,
                            max_trials=6, timer=timer, db=sqlite_url)(kernels.add_kernel)
    out, expected = add(kernel)
    assert torch.equal(out, expected)
    tried = [tuple(sorted(c.items())) for c in timer.configs]
    assert len(tried) == len(set(tried)) == 6
    assert all(c["BLOCK"] * c["num_warps"] <= 256 for c in timer.configs)
    (choice,) = kernel.choices()
    assert choice.search is not None and choice.search.strategy == "optuna"
    assert choice.search.space_size == len(kernel.configs) > 6
    with Store.open(sqlite_url, readonly=True) as store:
        (row,) = kernel_configs(store)
    assert (row.configs_tried, row.space_size) == (6, len(kernel.configs))


def test_a_failing_config_is_a_value_and_a_kernel_bug_surfaces(sqlite_url: str) -> None:
    timer = kernels.CountingTimer()
    kernel = tuner.autotune(space={"BLOCK": [24, 32]}, key=["n"], timer=timer,
                            db=sqlite_url)(kernels.add_kernel)
    out, expected = add(kernel)                  # tl.arange(0, 24) is not a power of 2
    assert torch.equal(out, expected) and kernel.stored_form(kernel.best_config) == {"BLOCK": 32}
    (choice,) = kernel.choices()
    statuses = [t.measurement.status for t in choice.search.trials]
    assert statuses == [Status.RUNTIME_ERROR, Status.OK]
    broken = tuner.autotune(space={"BLOCK": [24, 48]}, key=["n"], timer=timer,
                            db=sqlite_url)(kernels.add_kernel)
    with pytest.raises(Exception, match="power of 2"):
        add(broken)


def test_mistakes_are_usage_errors_naming_the_fix() -> None:
    with pytest.raises(UsageError, match="neither a parameter"):
        tuner.autotune(space={"BLOCKK": [16]}, key=["n"])(kernels.add_kernel)
    with pytest.raises(UsageError, match="key must list parameters"):
        tuner.autotune(space={"BLOCK": [16]}, key=["N"])(kernels.add_kernel)
    with pytest.raises(UsageError, match="not a JSON scalar"):
        tuner.autotune(space={"BLOCK": [[16]]}, key=["n"])(kernels.add_kernel)
    with pytest.raises(UsageError, match="above @triton.jit"):
        tuner.autotune(space={"BLOCK": [16]}, key=["n"])(lambda n: n)
    kernel = tuner.autotune(space={"BLOCK": [16]}, key=["n"])(kernels.add_kernel)
    with pytest.raises(UsageError, match="do not pass them"):
        kernel[(1,)](torch.zeros(4), torch.zeros(4), torch.zeros(4), 4, BLOCK=16)


def test_search_strategies_measure_each_config_once() -> None:
    configs = [{"a": a, "b": b} for a in range(6) for b in range(5) if (a + b) % 2 == 0]
    measured: list[dict[str, Any]] = []

    def measure(config: dict[str, Any]) -> Measurement:
        measured.append(config)
        if config["a"] == 0:
            return Measurement(status=Status.COMPILE_ERROR, error="too big")
        return Measurement(status=Status.OK, latency_ms=float(abs(config["a"] - 3) + abs(config["b"] - 1)))

    small = search_configs(configs, measure, max_trials=len(configs))
    assert small.strategy == "exhaustive" and measured == configs
    assert dict(small.best.config) == {"a": 3, "b": 1}
    measured.clear()
    large = search_configs(configs, measure, max_trials=7, seed=3)
    assert large.strategy == "optuna" and len(large.trials) == 7 == len(measured)
    assert len({tuple(sorted(c.items())) for c in measured}) == 7
    assert all(c in configs for c in measured)
    assert search_configs(configs, measure, max_trials=7, seed=3).trials == large.trials


def test_importing_tuner_autotune_loads_neither_triton_nor_torch() -> None:
    code = "import sys, tuner; tuner.autotune; print(sorted({'triton', 'torch'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_without_a_timer_the_interpreter_says_timings_mean_nothing(sqlite_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.kernels import guarded_db as database

    monkeypatch.setattr(database, "_warned", set())     # once per process: another test may have had it
    kernel = tuner.autotune(space={"BLOCK": [32, 64]}, key=["n"], db=sqlite_url)(kernels.add_kernel)
    with pytest.warns(KernelWarning, match="ranks nothing real"):
        out, expected = add(kernel)
    assert torch.equal(out, expected)
    (choice,) = kernel.choices()
    assert choice.stored and choice.configs_tried == 2 and choice.latency_ms > 0
