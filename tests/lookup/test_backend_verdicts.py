"""The backend applies only what was measured: eager verdicts and freezing winners, end to end.

Each test stores a verdict for the tiny MLP's graph through the real `Store.save_best` into a
SQLite file, then compiles the model with real `torch.compile`. What Inductor is asked to do is
observed by wrapping `torch._inductor.compile_fx.compile_fx` (the wrapper records its
`config_patches` and the live config, then calls the real one): no Inductor call at all for an
eager verdict; the freezing winner, freezing included (a hit's key carries grad=0: grad is off).
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from helpers import tiny_model_and_input
from helpers.stored import store_configs, tiny_workload

FREEZING = {"max_fusion_size": 8, "freezing": True}


@pytest.fixture(scope="module")
def tiny():
    """The tiny MLP, an input, the eager output, its workload and this platform."""
    from tuner.platform import current_platform

    model, x = tiny_model_and_input(11)
    with torch.no_grad():
        eager = model(x)
    return model, x, eager, tiny_workload(), current_platform("cpu")


@pytest.fixture
def process_db(monkeypatch: pytest.MonkeyPatch):
    """Point the process-wide lookup (what `backend="tuner"` uses) at a database, with
    TUNER_EXPLAIN on; the "said once" flag of the backend starts fresh."""
    import tuner.lookup.backend
    from tuner.lookup import reset_process_lookup
    from tuner.settings import Settings

    monkeypatch.setattr(tuner.lookup.backend, "_said_unmeasured", False)
    yield lambda url: reset_process_lookup(Settings(db_url=url, explain=True))
    reset_process_lookup()


def stored_db(tmp_path: Path, tiny, params: dict, **fields) -> str:
    *_, workload, platform = tiny
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, workload, platform, params, **fields)
    return url


def lookup_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tuner.lookup"]


def test_eager_verdict_runs_the_graph_uncompiled(tmp_path: Path, tiny, inductor_calls, process_db,
                                                 caplog: pytest.LogCaptureFixture,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    model, x, eager, workload, _ = tiny
    process_db(stored_db(tmp_path, tiny, {}, eager=True))
    with caplog.at_level(logging.INFO, logger="tuner.lookup"), torch.no_grad():
        compiled = torch.compile(model, backend="tuner")
        outs = [compiled(x) for _ in range(2)]
    assert all(torch.equal(out, eager) for out in outs)
    assert inductor_calls == []                                   # no Inductor compile at all
    [line] = [ln for ln in lookup_lines(caplog) if "exact hit" in ln]
    assert f"(key {workload.graphs[0].key[:12]})" in line
    assert "eager won: runs uncompiled" in line and line.endswith("no Inductor compile")
    assert "applies: nothing: eager won: runs uncompiled" in capsys.readouterr().err   # TUNER_EXPLAIN


def test_tuner_compile_runs_an_eager_verdict_uncompiled_too(tmp_path: Path, tiny, inductor_calls) -> None:
    import tuner

    model, x, eager, *_ = tiny
    compiled = tuner.compile(model, db=stored_db(tmp_path, tiny, {}, eager=True))
    with torch.no_grad():
        outs = [compiled(x) for _ in range(3)]
    assert all(torch.equal(out, eager) for out in outs)
    assert inductor_calls == []


def test_backend_freezes_with_grad_off_and_tuner_compile_is_the_same_backend(
        tmp_path: Path, tiny, inductor_calls, process_db, caplog: pytest.LogCaptureFixture) -> None:
    import tuner

    model, x, eager, *_ = tiny
    url = stored_db(tmp_path, tiny, FREEZING, unfrozen_params={"max_fusion_size": 16}, unfrozen_speedup=1.04)
    process_db(url)
    with caplog.at_level(logging.INFO, logger="tuner.lookup"), torch.no_grad():
        out = torch.compile(model, backend="tuner")(x)
    assert torch.allclose(out, eager, atol=1e-5)
    # the stored winner as measured, freezing included, parameters bound as constants in one trace
    # (Inductor's freezing re-enters compile_fx once, without patches, with the live config frozen)
    assert [c["patches"] for c in inductor_calls if c["patches"]] == [{"max_fusion_size": 8, "freezing": True}]
    assert inductor_calls[0]["get_attr"] > 0 and inductor_calls[-1]["freezing"]
    assert not [ln for ln in lookup_lines(caplog) if "without freezing" in ln]

    del inductor_calls[:]
    torch._dynamo.reset()
    frozen = tuner.compile(model, db=url)
    with torch.no_grad():
        outs = [frozen(x) for _ in range(3)]
    assert inductor_calls[0]["get_attr"] > 0                                     # parameters as constants
    assert [c["patches"] for c in inductor_calls if c["patches"]] == [{"max_fusion_size": 8, "freezing": True}]
    assert all(torch.allclose(o, eager, atol=1e-5) for o in outs)


