"""The backend applies only what was measured: eager verdicts and freezing winners, end to end.

Each test stores a verdict for the tiny MLP's graph through the real `Store.save_best` into a
SQLite file, then compiles the model with real `torch.compile`. What Inductor is asked to do is
observed by wrapping `torch._inductor.compile_fx.compile_fx` (the wrapper records its
`config_patches` and the live config, then calls the real one): no Inductor call at all for an
eager verdict; exactly the config measured without freezing for the plain backend.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from helpers import tiny_model_and_input
from test_lookup import store_configs, tiny_workload

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
def inductor_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every call Inductor's compile_fx gets from now on: its patches and the live config."""
    import torch._inductor.compile_fx as cfx

    calls, original = [], cfx.compile_fx

    def recording(gm, example_inputs, *args, **kwargs):
        from torch._inductor import config

        calls.append(dict(patches=dict(kwargs.get("config_patches") or {}), freezing=config.freezing,
                          max_fusion_size=config.max_fusion_size,
                          get_attr=sum(n.op == "get_attr" for n in gm.graph.nodes)))
        return original(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", recording)
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()


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
        outs = [compiled(x) for _ in range(3)]                    # past the freezing probe
    assert all(torch.equal(out, eager) for out in outs)
    assert inductor_calls == []


def test_plain_backend_applies_the_config_measured_without_freezing(
        tmp_path: Path, tiny, inductor_calls, process_db, caplog: pytest.LogCaptureFixture) -> None:
    import tuner

    model, x, eager, *_ = tiny
    url = stored_db(tmp_path, tiny, FREEZING, unfrozen_params={"max_fusion_size": 16}, unfrozen_speedup=1.04)
    process_db(url)
    with caplog.at_level(logging.INFO, logger="tuner.lookup"), torch.no_grad():
        out = torch.compile(model, backend="tuner")(x)
    assert torch.allclose(out, eager, atol=1e-5)
    assert inductor_calls[0]["patches"] == {"max_fusion_size": 16}          # exactly what was measured
    assert inductor_calls[-1]["max_fusion_size"] == 16 and not inductor_calls[-1]["freezing"]
    assert any("applying max_fusion_size=16, measured without freezing (speedup 1.040x)" in ln
               for ln in lookup_lines(caplog))

    # tuner.compile still applies the freezing winner itself (second no-grad call: frozen re-trace)
    del inductor_calls[:]
    torch._dynamo.reset()
    frozen = tuner.compile(model, db=url)
    with torch.no_grad():
        outs = [frozen(x) for _ in range(3)]
    assert inductor_calls and all(c["get_attr"] > 0 for c in inductor_calls)   # parameters as constants
    assert inductor_calls[0]["patches"] == {"max_fusion_size": 8, "freezing": True}
    assert all(torch.allclose(o, eager, atol=1e-5) for o in outs)


def test_plain_backend_without_a_measured_alternative_applies_defaults_and_says_why_once(
        tmp_path: Path, tiny, inductor_calls, process_db, caplog: pytest.LogCaptureFixture) -> None:
    from tuner.lookup import NO_UNFROZEN

    model, x, eager, *_ = tiny
    process_db(stored_db(tmp_path, tiny, FREEZING))                 # a row from before unfrozen_params
    with caplog.at_level(logging.INFO, logger="tuner.lookup"), torch.no_grad():
        for _ in range(2):                                           # two compiles of the graph
            torch._dynamo.reset()
            out = torch.compile(model, backend="tuner")(x)
    assert torch.allclose(out, eager, atol=1e-5)
    assert inductor_calls and all(c["patches"] == {} for c in inductor_calls)          # Inductor's defaults
    assert all(c["max_fusion_size"] == 64 and not c["freezing"] for c in inductor_calls)
    lines = lookup_lines(caplog)
    assert len([ln for ln in lines if "exact hit" in ln and "applying Inductor's defaults" in ln]) == 2
    assert len([ln for ln in lines if ln.endswith("compiles such graphs with Inductor's defaults")]) == 1
    assert all(NO_UNFROZEN in ln for ln in lines if "exact hit" in ln)
