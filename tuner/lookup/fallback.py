"""A stored config that fails here: Inductor's defaults instead, never an error in the user's program.

A row can name a config that cannot compile on this machine: imported from a teammate, stored
under another torch (the same-hardware tier), layered over the user's own `mode=`/`options=`
(nobody measured the two together), or with values Inductor refuses here (GEMM backends this
device lacks, `cpp.gemm_thread_factors` for another thread count). `compile_stored` runs the
compile under the stored config inside a guard: any exception warns once, naming the graph, the
config and the fix, and compiles the graph with Inductor's defaults under the user's own mode and
options. The failure is remembered for the process (`failed`), so a recompile of the same graph
goes straight to the defaults instead of failing again.

Some failures only show at the graph's first call (a kernel that Inductor compiles lazily or a
tile config that cannot launch): `FirstCall` runs the first call under the same guard, with the
inputs it may mutate restored, and on failure switches to the defaults for good. What cannot be
caught: a failure after the first call (the graph ran once correctly, so a later error is the
program's own), a crash of the process itself (a segfault or an abort inside a kernel), and a
wrong result (measured configs were checked against eager when stored; see docs/lookup.md).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

__all__ = ["FirstCall", "compile_stored", "failed"]

log = logging.getLogger("tuner.lookup")

_lock = threading.Lock()
failed: set[str] = set()        # (graph key, config) texts that failed in this process


def compile_stored(memo: str, what: str, stored: Callable[[], Callable], defaults: Callable[[], Callable],
                   warn: Callable[[str], None]) -> Callable:
    """`stored()` (the compile under a stored config), guarded; `defaults()` when it raises, or
    when `memo` (the graph key and the config, as text) already failed in this process. `what`
    names the graph and the config for the one warning (`warn`)."""
    if memo in failed:
        return defaults()
    try:
        compiled = stored()
    except Exception as exc:  # noqa: BLE001 - a stored row must never break the user's program
        _failed(memo, what, exc, warn, when="failed to compile here")
        return defaults()
    return FirstCall(compiled, defaults, memo=memo, what=what, warn=warn)


def _failed(memo: str, what: str, exc: BaseException, warn: Callable[[str], None], *, when: str) -> None:
    with _lock:
        failed.add(memo)
    log.debug("tuner: the stored config of %s %s", what, when, exc_info=exc)
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    warn(f"tuner: the stored config of {what} {when} ({type(exc).__name__}: {first}); compiled it with "
         f"Inductor's defaults under your own mode/options instead. Fix: re-run `tuner search` on this "
         f"machine to replace the row (the traceback is logged at DEBUG on the tuner.lookup logger)")


class FirstCall:
    """A compiled graph whose first call is guarded: if it raises, the graph is compiled with the
    defaults and the call runs again on the inputs as they were (tensors that are not parameters
    are copied before the first call, since a graph may mutate its inputs, e.g. BatchNorm's
    running statistics). Later calls go straight to whichever compile won."""

    def __init__(self, compiled: Callable, defaults: Callable[[], Callable], *, memo: str, what: str,
                 warn: Callable[[str], None]) -> None:
        self._compiled, self._defaults = compiled, defaults
        self._memo, self._what, self._warn = memo, what, warn
        self._checked = False
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self._checked:
            return self._compiled(*args)
        with self._lock:
            if self._checked:
                return self._compiled(*args)
            saved = _snapshot(args)
            try:
                out = self._compiled(*args)
            except Exception as exc:  # noqa: BLE001 - a stored row must never break the user's program
                _failed(self._memo, self._what, exc, self._warn, when="failed at its first call")
                _restore(args, saved)
                self._compiled = self._defaults()
                out = self._compiled(*args)
            self._checked = True
            return out


def _snapshot(args: tuple[Any, ...]) -> dict[int, Any]:
    import torch

    return {i: a.detach().clone() for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter)}


def _restore(args: tuple[Any, ...], saved: dict[int, Any]) -> None:
    import torch

    with torch.no_grad():
        for i, copy in saved.items():
            if args[i].shape == copy.shape:
                args[i].copy_(copy)
