"""`tuner.compile` and `tuner.install`: the tuned `torch.compile`, from Python.

`tuner.compile(model)` is `torch.compile(model, backend="tuner")` with the backend's
settings as arguments: `db=` (this model's own database, whose lookup warns once on its own)
and `precision=`. Freezing needs nothing more: the backend itself applies a stored config that
turns freezing on, on graphs compiled with grad disabled (`tuner.inductor.freezing`: one trace,
weights bound as constants, re-frozen or run unfrozen when they change, the config measured
without freezing when grad is enabled). `tuner.compile` and `backend="tuner"` share that one
implementation.

`tuner.install()` routes a plain `torch.compile(model)` to the `tuner` backend for this
process (`torch.compiler.set_default_backend`).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

import torch

from tuner.lookup.backend import TunerBackend
from tuner.lookup.lookup import Lookup
from tuner.lookup.opt_in import PRECISION_OPTION, UNSAFE_OPTION, split_opt_ins
from tuner.precision import get_precision
from tuner.settings import Settings


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
        options = {**(options or {}), PRECISION_OPTION: get_precision(precision).name}
    if unsafe:
        options = {**(options or {}), UNSAFE_OPTION: True}
    split_opt_ins(options)                 # an unknown precision is the caller's mistake, said here
    lookup = None if db is None else Lookup(dataclasses.replace(Settings.from_env(), db_url=db))
    backend = TunerBackend(mode=mode, options=options, lookup=lookup)
    runner = torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph)
    if isinstance(model, torch.nn.Module):
        return TunedModule(model, runner)

    @functools.wraps(model)
    def tuned(*args: Any, **kwargs: Any) -> Any:
        return runner(*args, **kwargs)

    return tuned


def install() -> None:
    """Make a plain `torch.compile(model)` use the `tuner` backend in this process.

    Same as passing `backend="tuner"` everywhere: stored configs apply, freezing included on
    graphs compiled with grad disabled.
    Undo with `torch.compiler.set_default_backend(None)`.
    """
    torch.compiler.set_default_backend("tuner")


class TunedModule(torch.nn.Module):
    """What `tuner.compile` returns for a module: calls go through the tuner's compiled model.

    The original module is `_orig_mod` (a submodule, so parameters, `state_dict`, `.eval()`
    and `.to()` reach it); other attributes are looked up on it.
    """

    def __init__(self, mod: torch.nn.Module, runner: Callable[..., Any]) -> None:
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
