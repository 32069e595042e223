"""Freezing in the backend: a stored freezing config applies through `backend="tuner"` in one
trace, and frozen code never runs with stale weights.

A freezing winner for the tiny MLP is stored through the real store; the model is compiled with
real `torch.compile` and Inductor. Every test changes the weights the way users do
(`load_state_dict`, an optimizer step, an in-place edit, a new Parameter object) and checks the
output against eager with the new weights: Inductor's freezing folds the weights into the
compiled code, so without the checks of `FrozenGraph` these outputs are the old model's.
"""
from __future__ import annotations


import pytest
import torch

from helpers import tiny_model_and_input
from helpers.stored import store_configs, tiny_workload

FREEZING = {"max_fusion_size": 8, "freezing": True}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tuner.platform import current_platform

    url = f"sqlite:///{tmp_path_factory.mktemp('freezing') / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu"), FREEZING, unfrozen_params={"max_fusion_size": 16})
    return url


def backend_compiles(calls: list[dict]) -> list[dict]:
    """The backend's compiles among `inductor_calls` (not Inductor's own re-entry while it
    freezes): whether each froze and how many weights it bound."""
    return [dict(freezing=bool(c["patches"].get("freezing")), get_attr=c["get_attr"]) for c in calls if c["outer"]]


def backend(db: str):
    from tuner.lookup import Lookup
    from tuner.lookup.backend import TunerBackend
    from tuner.settings import Settings

    return TunerBackend(lookup=Lookup(Settings(db_url=db)))


def check(compiled, model, x) -> None:
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)


def test_backend_freezes_in_one_trace(db: str, inductor_calls: list[dict]) -> None:
    from torch._inductor.utils import run_and_get_code

    model, x = tiny_model_and_input(3)
    compiled = torch.compile(model, backend=backend(db))
    with torch.no_grad():
        out, codes = run_and_get_code(compiled, x)
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
        check(compiled, model, x * 2)
    assert "_frozen_param" in "\n".join(codes)          # Inductor folded the weights as constants
    # one trace, every weight and bias bound
    assert backend_compiles(inductor_calls) == [dict(freezing=True, get_attr=4)]


@pytest.mark.parametrize("change", ["load_state_dict", "optimizer_step", "in_place", "new_parameter"])
def test_changed_weights_are_frozen_again_never_stale(db: str, inductor_calls: list[dict], change: str) -> None:
    model, x = tiny_model_and_input(3)
    compiled = torch.compile(model, backend=backend(db))
    check(compiled, model, x)
    first = next(iter(model.parameters()))
    if change == "load_state_dict":
        other, _ = tiny_model_and_input(4)
        model.load_state_dict(other.state_dict())
    elif change == "optimizer_step":
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        model(x).square().sum().backward()
        opt.step()
    elif change == "in_place":
        with torch.no_grad():
            first.mul_(-2.0)
    else:
        name = next(n for n, p in model.named_parameters() if p is first)
        module_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(module_name), attr, torch.nn.Parameter(torch.randn_like(first)))
    check(compiled, model, x)
    # frozen again with the new weights
    assert [c["freezing"] for c in backend_compiles(inductor_calls)] == [True, True]
    check(compiled, model, x)
    assert len(backend_compiles(inductor_calls)) == 2        # unchanged weights: no further compile


def test_weights_that_keep_changing_run_unfrozen(db: str, inductor_calls: list[dict]) -> None:
    from tuner.inductor.freezing import MAX_REFREEZES

    model, x = tiny_model_and_input(3)
    compiled = torch.compile(model, backend=backend(db))
    for step in range(MAX_REFREEZES + 3):
        with torch.no_grad():
            next(iter(model.parameters())).add_(0.1 * step)
        check(compiled, model, x)
    frozen = [c for c in backend_compiles(inductor_calls) if c["freezing"]]
    assert len(frozen) == 1 + MAX_REFREEZES               # the first freeze and the re-freezes, no more
    assert backend_compiles(inductor_calls)[-1] == dict(freezing=False, get_attr=0)   # then the config without freezing


def test_grad_enabled_never_runs_frozen_code(db: str, inductor_calls: list[dict]) -> None:
    """Dynamo guards on grad mode, so a call with grad on is another graph; `FrozenGraph` itself
    also refuses to run frozen with grad on (the case a guard-free caller would reach)."""
    import tuner.inductor.freezing as freezing

    model, x = tiny_model_and_input(3)
    compiled = torch.compile(model, backend=backend(db))
    check(compiled, model, x)
    out = compiled(x)
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
    assert out.requires_grad                          # a graph with autograd, not the frozen one
    first, *rest = backend_compiles(inductor_calls)
    assert first["freezing"] and not any(c["freezing"] for c in rest)   # then forward and backward, unfrozen

    calls = []
    gm = torch.fx.symbolic_trace(lambda w, v: v @ w)
    w = torch.randn(3, 3)
    with torch.no_grad():
        graph = freezing.FrozenGraph(gm, [w, x[:, :3]], [0], lambda g, ins: (calls.append("frozen") or g.forward),
                                     lambda: (calls.append("thawed") or gm.forward))
        graph(w, x[:, :3])
    graph(w, x[:, :3])
    assert calls == ["frozen", "thawed"]


def test_tuner_compile_is_the_same_backend(db: str, inductor_calls: list[dict]) -> None:
    import tuner

    model, x = tiny_model_and_input(3)
    compiled = tuner.compile(model, db=db)
    check(compiled, model, x)
    check(compiled, model, x + 1)
    assert backend_compiles(inductor_calls) == [dict(freezing=True, get_attr=4)]
    model.load_state_dict(tiny_model_and_input(5)[0].state_dict())
    check(compiled, model, x)
    assert [c["freezing"] for c in backend_compiles(inductor_calls)] == [True, True]
