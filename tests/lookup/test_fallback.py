"""A stored config that fails here never breaks the user's program: Inductor's defaults, one warning.

The end-to-end case is one a new user meets without any tampering: a stored `max_autotune=True`
layered over the user's own `options={"max_autotune_gemm_backends": "TRITON"}` (nobody measured the
two together) cannot compile a matmul on a CPU (`NoValidChoicesError`), while the user's options
alone compile fine. Real store, real torch.compile, real Inductor.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from helpers import tiny_model_and_input
from helpers.stored import store_configs, tiny_workload

USER = {"max_autotune_gemm_backends": "TRITON"}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):
    """Inductor's compile_fx calls, recorded (whether each asked for max_autotune), and the
    process's memory of failed configs emptied."""
    import torch._inductor.compile_fx as cfx

    from tuner.lookup import fallback

    monkeypatch.setattr(fallback, "failed", set())
    calls, original = [], cfx.compile_fx

    def recording(gm, example_inputs, *args, **kwargs):
        calls.append(bool((kwargs.get("config_patches") or {}).get("max_autotune")))
        return original(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", recording)
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()


def test_a_config_that_cannot_compile_here_gives_the_defaults_under_the_users_options(
        tmp_path: Path, fresh: list[bool]) -> None:
    from tuner.lookup import Lookup, LookupWarning
    from tuner.lookup.backend import TunerBackend
    from tuner.platform import current_platform
    from tuner.settings import Settings

    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    store_configs(url, tiny_workload(), current_platform("cpu"), {"max_autotune": True})
    lookup = Lookup(Settings(db_url=url))
    model, x = tiny_model_and_input(7)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for _ in range(2):              # a recompile does not try the failed config again
            torch._dynamo.reset()
            out = torch.compile(model, backend=TunerBackend(lookup=lookup), options=USER)(x)
            torch.testing.assert_close(out, model(x))
    messages = [str(w.message) for w in caught if issubclass(w.category, LookupWarning)]
    assert len(messages) == 1, messages
    assert "failed to compile here (InductorError" in messages[0]
    assert "max_autotune=True" in messages[0] and "re-run `tuner search`" in messages[0]
    assert fresh.count(True) == 1       # the stored config was tried once, in the first compile only


def test_a_failing_first_call_runs_again_with_the_defaults_on_the_inputs_as_they_were() -> None:
    from tuner.lookup.fallback import FirstCall, failed

    said: list[str] = []
    state = torch.zeros(3)

    def broken(buf: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        buf.add_(1.0)                   # mutates its input, then fails (a kernel that cannot launch)
        raise RuntimeError("invalid launch configuration")

    def defaults() -> object:
        def run(buf: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            buf.add_(1.0)
            return buf + x
        return run

    graph = FirstCall(broken, defaults, memo="key config", what="graph 0", warn=said.append)
    out = graph(state, torch.ones(3))
    assert torch.equal(state, torch.ones(3))        # mutated once, by the defaults, not twice
    assert torch.equal(out, torch.full((3,), 2.0))
    assert graph(state, torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert len(said) == 1 and "failed at its first call (RuntimeError: invalid launch" in said[0]
    assert "key config" in failed
    failed.discard("key config")


def test_the_dispatcher_never_raises_on_a_users_call() -> None:
    """A stored bucket size such as 10**400 made every call raise `math domain error`."""
    from tuner.lookup.dispatch import Dispatcher, SymbolSite, bind

    dynamic = "graph\n%0 = placeholder x() :: T([s0,4] float32 cpu)\n%1 = call_function relu(%0) :: T([s0,4] float32 cpu)"
    huge = dynamic.replace("s0", str(10**400))
    assert bind(dynamic, dynamic.replace("s0", "8")) == {"s0": 8}
    assert bind(dynamic, huge) is None               # an absurd stored size binds nothing

    said: list[str] = []
    copies = [lambda x: ("first", x.shape[0]), lambda x: ("second", x.shape[0])]
    dispatcher = Dispatcher([SymbolSite("s0", 0, 0)], [({"s0": 10**400}, 1), ({"s0": 8}, 0)], copies,
                            warn=said.append)
    for _ in range(2):
        assert dispatcher(torch.zeros(5, 4)) == ("second", 5)   # copy 0 of the first bucket, every call
    assert len(said) == 1 and "could not choose a shape bucket" in said[0]
