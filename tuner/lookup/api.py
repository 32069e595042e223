"""`tuner.compile` and `tuner.install`: the tuned `torch.compile`, from Python.

`tuner.compile(model)` is `torch.compile(model, backend="tuner")` plus the one thing a
backend cannot do: a stored config that turns **freezing** on. Dynamo decides whether
parameters are constants while it traces, before any backend runs, and the graph key that
says which config applies is only known once the backend sees the graph. So:

1. The first call made with grad disabled is traced normally. Each graph is looked up by
   its key. A graph whose stored config turns freezing on runs uncompiled for this call
   (the Dynamo graph, executed eagerly: same result, no compile spent on it).
2. The next call with grad disabled goes through a second `torch.compile` of the same
   model (its own backend instance, so Dynamo traces again) inside
   `compiler.trace_context` (Dynamo's `prepare_freezing`): parameters become constants and
   Inductor freezes them. The frozen graphs have other keys than the stored ones, so the
   n-th frozen graph gets the config decided for the n-th graph of step 1. Later no-grad
   calls go to that frozen model directly, with no per-call cost.
When no graph of the first no-grad call wants freezing (the usual case), step 2 never
happens and `tuner.compile` costs what `backend="tuner"` costs.

Limits: freezing follows the graphs of the first no-grad call. Graphs Dynamo traces later
(new shapes, new code paths) are ordinary traces: looked up by their own keys and given
what `backend="tuner"` gives them (the config measured without freezing). Calls with grad
enabled never freeze (freezing is for inference only) and use the first compiled model.
Freezing assumes the weights do not change: the frozen model keeps the values it saw at its
first call, exactly as with Inductor's own `freezing`. `db=` gives the model its own lookup, which warns
(once) on its own.

`tuner.install()` routes a plain `torch.compile(model)` to the `tuner` backend for this
process (`torch.compiler.set_default_backend`); that is the backend path, so beside a
freezing config it applies the config measured without freezing (`tuner.lookup.backend_choice`).
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Callable, Mapping

import torch

from tuner.inductor import CompileConfig, trace_context
from tuner.lookup.backend import FreezingPlan, TunerBackend
from tuner.lookup.lookup import Lookup
from tuner.lookup.opt_in import UNSAFE_OPTION, split_opt_ins
from tuner.precision import OPTION, get_precision
from tuner.settings import Settings

_FREEZE = CompileConfig(freezing=True)


def compile(model: Callable[..., Any], *, mode: str | None = None, options: Mapping[str, Any] | None = None,
            dynamic: bool | None = None, fullgraph: bool = False, db: str | None = None,
            precision: str | None = None, unsafe: bool = False) -> Any:
    """Compile `model` (an `nn.Module` or a function) with the stored best configs.

    Like `torch.compile(model, backend="tuner", mode=mode, options=options, dynamic=dynamic,
    fullgraph=fullgraph)`; `mode` and `options` are the starting point and a stored config
    wins where both set a knob. `db` overrides `$TUNER_DB` for this model. `precision` (a
    `tuner.precision` mode, e.g. "bf16-autocast"; same as `options={"precision": ...}`) opts in
    to stored configs of that precision; without it only fp32 configs apply. `unsafe` (same as
    `options={"unsafe": True}`) opts in to stored configs whose search ran with `--unsafe`;
    without it those graphs get Inductor's defaults. UsageError for an
    unknown precision. Nothing is
    looked up or compiled here: that happens at the first call, as with torch.compile.
    Returns an `nn.Module` (`TunedModule`, whose state_dict keys carry the `_orig_mod.`
    prefix as torch.compile's do) for a module, a function for a function.
    """
    if precision is not None:
        options = {**(options or {}), OPTION: get_precision(precision).name}
    if unsafe:
        options = {**(options or {}), UNSAFE_OPTION: True}
    split_opt_ins(options)                 # an unknown precision is the caller's mistake, said here
    lookup = None if db is None else Lookup(dataclasses.replace(Settings.from_env(), db_url=db))
    runner = _Runner(model, mode=mode, options=options, dynamic=dynamic, fullgraph=fullgraph, lookup=lookup)
    if isinstance(model, torch.nn.Module):
        return TunedModule(model, runner)

    @functools.wraps(model)
    def tuned(*args: Any, **kwargs: Any) -> Any:
        return runner(*args, **kwargs)

    return tuned


def install() -> None:
    """Make a plain `torch.compile(model)` use the `tuner` backend in this process.

    Same as passing `backend="tuner"` everywhere: stored configs apply, freezing ones by
    their measured alternative without freezing.
    Undo with `torch.compiler.set_default_backend(None)`.
    """
    torch.compiler.set_default_backend("tuner")


class _Runner:
    """Routes calls to the normal compiled model, or after a freezing request to the frozen one."""

    def __init__(self, model: Callable[..., Any], *, mode: str | None, options: Mapping[str, Any] | None,
                 dynamic: bool | None, fullgraph: bool, lookup: Lookup | None) -> None:
        self._model = model
        self._kw: dict[str, Any] = dict(dynamic=dynamic, fullgraph=fullgraph)
        self._mode, self._options, self._lookup = mode, options, lookup
        self.plan = FreezingPlan()
        self.compiled = self._compile()
        self.frozen: Callable[..., Any] | None = None
        self._probed = False            # the first no-grad call has run (phase 1)
        self._frozen_traced = False     # the frozen model's first call has run (phase 2)
        self._lock = threading.Lock()

    def _compile(self) -> Callable[..., Any]:
        """A torch.compile of the model with its own backend instance: Dynamo keeps compiled
        code per backend, so a second one traces again (under trace_context, frozen)."""
        backend = TunerBackend(mode=self._mode, options=self._options, lookup=self._lookup,
                               freezing=self.plan)
        return torch.compile(self._model, backend=backend, **self._kw)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            return self.compiled(*args, **kwargs)
        if self._frozen_traced:
            return self.frozen(*args, **kwargs)          # type: ignore[misc]
        if self._probed and self.frozen is None:
            return self.compiled(*args, **kwargs)
        with self._lock:
            if self._frozen_traced or (self._probed and self.frozen is None):
                return self(*args, **kwargs)
            if self.frozen is not None:
                # Only this call runs inside trace_context: entering it costs ~0.25 ms, too much per
                # call. Later traces (new shapes) are ordinary ones, looked up by their own keys.
                with trace_context(_FREEZE):
                    out = self.frozen(*args, **kwargs)
                self._frozen_traced = True
                return out
            self.plan.probing = True
            try:
                out = self.compiled(*args, **kwargs)
            finally:
                self.plan.probing = False
                self._probed = True
            if self.plan.requested:
                self.frozen = self._compile()
        return out


class TunedModule(torch.nn.Module):
    """What `tuner.compile` returns for a module: calls go through the tuner's compiled model.

    The original module is `_orig_mod` (a submodule, so parameters, `state_dict`, `.eval()`
    and `.to()` reach it); other attributes are looked up on it.
    """

    def __init__(self, mod: torch.nn.Module, runner: _Runner) -> None:
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_tuner_runner", runner)   # not a submodule: no duplicate parameters

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._tuner_runner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_orig_mod":      # not set up (yet): copy and pickle probe before __init__
                raise
            return getattr(self._orig_mod, name)
