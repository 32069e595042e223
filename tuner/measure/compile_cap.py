"""Stopping a candidate's compile at the adaptive cap, inside the trial process.

The driver computes the cap (`tuner.trial.compile_cap`) and sends it in the `TrialRequest`;
`run_trial` arms it (`armed`) around the candidate's `prepare` only, never the baseline's, and
`prepare` wraps the first call, the one that traces and compiles, in `capped`, inside the node's
compile lock so that waiting at the lock does not count. Past the cap a SIGALRM handler raises
`CompileStopped` in the main thread, wherever the compile is (Dynamo's tracing, Inductor's
lowering, waiting on the C++ compiler or a compile worker). Dynamo and Inductor wrap what a
backend raises (BackendCompilerFailed, InductorError, InternalTorchDynamoError), so `stopped`
finds it along `__cause__`/`__context__`; a code path that swallows it is raised into again
every RETRY_S, and a compile that still finishes past the cap is stopped on its way out. Off the
main thread, or when the real-time timer is already in use, nothing is capped (the per-trial
deadline, `--timeout`, stays the outer bound either way). A compile stuck in C code never returns
to Python, where the handler runs: `tuner.measure.watchdog` ends its process a little past the cap.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

from tuner.trial import CompileCap

__all__ = ["CompileStopped", "armed", "armed_cap", "capped", "stopped"]

RETRY_S = 1.0       # after the cap: raise again this often, in case a handler swallowed it

_ARMED: list[CompileCap | None] = [None]


class CompileStopped(Exception):
    """A candidate's compile ran past its cap; the message is the cap's reason."""

    def __init__(self, cap: CompileCap):
        super().__init__(cap.reason())
        self.cap = cap


@contextlib.contextmanager
def armed(cap: CompileCap | None) -> Iterator[None]:
    """Within it, `capped` sections stop at `cap` (None: they are not capped)."""
    previous, _ARMED[0] = _ARMED[0], cap
    try:
        yield
    finally:
        _ARMED[0] = previous


def armed_cap() -> CompileCap | None:
    """The cap `armed` holds now (None: none), which `capped` sections stop at."""
    return _ARMED[0]


@contextlib.contextmanager
def capped() -> Iterator[None]:
    """Raise CompileStopped once the body has run for the armed cap's seconds (nothing armed,
    off the main thread or with ITIMER_REAL already running: no cap)."""
    cap = _ARMED[0]
    if (cap is None or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)):
        yield
        return
    state = {"active": True, "fired": False}

    def stop(signum: int, frame: object) -> None:
        if state["active"]:
            state["fired"] = True
            raise CompileStopped(cap)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, cap.seconds, RETRY_S)
    try:
        yield
    finally:
        state["active"] = False
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)
    if state["fired"]:      # the body swallowed the exception and finished past the cap anyway
        raise CompileStopped(cap)


def stopped(exc: BaseException) -> CompileStopped | None:
    """The CompileStopped `exc` is or was raised from (through Dynamo's and Inductor's wrapping), or None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, CompileStopped):
            return current
        seen.add(id(current))
        todo += [current.__context__, current.__cause__]
    return None
