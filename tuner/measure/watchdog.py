"""A watchdog on what a trial process runs under the node's compile lock: a call that never returns
ends the process with a recorded result, which frees the lock.

`prepare` (tuner.measure.core) holds the compile lock, shared, for a variant's compiler probe, first
call (trace, compile, first run) and later calls; every timed section on the node waits for it
(it wants the lock exclusive). A hang there inside C code (a deadlock in a kernel or a library it
calls) never returns to Python, so neither the adaptive cap's SIGALRM (tuner.measure.compile_cap)
nor any other signal handler runs, and the lock was held until the trial's --timeout. So `watched`
runs a thread beside that section. Dynamo's compilation callbacks (`torch._dynamo.callback_handler`:
its traces with the backend's compile, a backward compiled at the first backward, a cudagraph
recording) tell compiling from running, and each change starts the clock again:

- **Compiling** is bounded only where the adaptive cap is armed (a candidate of a trial, once the
  search has seen MIN_COMPILES compiles), at the cap plus CAP_GRACE_S: the cap's SIGALRM stops an
  ordinary slow compile first, and the watchdog acts only when that handler cannot run. Before the
  cap exists, and for the default compile, nothing but --timeout bounds a compile: no bound is safe
  for one (a max-autotune compile of a large model takes minutes, a first C++ compile on a loaded
  machine 10-20 s).
- **Running** (the model's calls, compiled or eager) is bounded at RUN_FACTOR times the eager call
  the references took moments before in this process, at least RUN_FLOOR_S. On a GPU the first
  call's running counts as compiling: Triton kernels autotune at their first launch, outside
  Dynamo's callbacks.

A `torch._dynamo.reset()` (model code may call it) drops every callback; a bound that runs out
while they are gone could not tell a compile from a run, so the watchdog registers them again and
bounds nothing until the next compile starts or ends or the first call returns.

Past its bound the thread calls the `finish` that `run_trial` or `run_confirmation` armed
(`finishing`) with a message saying what did not return within how long; they turn it into their
result (TIMEOUT), and the trial process writes it and exits (workers/trial_process.py), which
releases the lock. Without an armed `finish` (a caller in a process of its own) nothing is watched.
A hang that holds the GIL would keep the thread from running: then faulthandler's watchdog, which
needs no GIL, ends the process GIL_GRACE_S after the bound, every thread's traceback on stderr.
"""
from __future__ import annotations

import contextlib
import faulthandler
import threading
import time
from typing import Any, Callable, Iterator

__all__ = ["CAP_GRACE_S", "GIL_GRACE_S", "RUN_FACTOR", "RUN_FLOOR_S", "Watch", "finishing", "watched"]

RUN_FACTOR = 50.0       # a call may run this many times the eager call before it is taken for a hang
RUN_FLOOR_S = 10.0      # ... and at least this long (a tiny model's eager call takes microseconds)
CAP_GRACE_S = 5.0       # past the adaptive cap: time for its SIGALRM to stop the compile first
GIL_GRACE_S = 10.0      # past a bound, when the watchdog thread itself could not run: faulthandler ends the process

_FINISH: list[Callable[[str], None] | None] = [None]


@contextlib.contextmanager
def finishing(finish: Callable[[str], None] | None) -> Iterator[None]:
    """Within it, a `watched` section past its bound calls `finish(message)` from the watchdog
    thread; `finish` hands in the process's result for that message and ends the process (it
    should not return). None: nothing is watched."""
    previous, _FINISH[0] = _FINISH[0], finish
    try:
        yield
    finally:
        _FINISH[0] = previous


class Watch:
    """One watched section (see the module docstring); `first_call_done` once the first call returned."""

    def __init__(self, finish: Callable[[str], None], *, what: str, run_s: float, eager_s: float,
                 cap_s: float | None, first_run_bounded: bool):
        self.finish, self.what, self.run_s, self.eager_s, self.cap_s = finish, what, run_s, eager_s, cap_s
        self._runs_bounded = first_run_bounded
        self._compiling = False
        self._blind = False         # the callbacks were gone: compiling or not is unknown until the next event
        self._since = time.monotonic()
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="tuner-watchdog", daemon=True)

    def first_call_done(self) -> None:
        with self._cond:
            self._runs_bounded, self._blind = True, False      # the call returned: nothing compiles now
            self._change()

    def _compile_start(self, _args: Any) -> None:
        with self._cond:
            self._compiling, self._blind = True, False
            self._change()

    def _compile_end(self, _args: Any) -> None:
        with self._cond:
            self._compiling, self._blind = False, False
            self._change()

    def _change(self) -> None:
        """The phase changed (the caller holds the condition): its clock starts now."""
        self._since = time.monotonic()
        bound = self._bound()
        if bound is None:
            faulthandler.cancel_dump_traceback_later()
        else:
            faulthandler.dump_traceback_later(bound + GIL_GRACE_S, exit=True)
        self._cond.notify_all()

    def _bound(self) -> float | None:
        if self._blind:
            return None
        if self._compiling or not self._runs_bounded:
            return None if self.cap_s is None else self.cap_s + CAP_GRACE_S
        return self.run_s

    def _message(self, bound: float) -> str:
        if self._compiling or not self._runs_bounded:
            return (f"{self.what} ran {bound:.3g} s, past the adaptive compile cap of {self.cap_s:.3g} s, without "
                    f"returning to Python, where the cap would have stopped it; its trial process was ended, "
                    f"which frees the node's compile lock")
        return (f"{self.what} did not return within {bound:.3g} s ({RUN_FACTOR:g}x the eager call's "
                f"{self.eager_s:.3g} s, at least {RUN_FLOOR_S:g} s) while holding the node's compile lock; its "
                f"trial process was ended, which frees the lock")

    def _watch(self) -> None:
        with self._cond:
            while not self._done:
                bound = self._bound()
                left = None if bound is None else self._since + bound - time.monotonic()
                if left is not None and left <= 0:
                    if self._listening():
                        message = self._message(bound)  # type: ignore[arg-type]
                        break
                    self._listen()          # torch._dynamo.reset() dropped the callbacks: compiles went unseen
                    self._blind = True
                    self._change()
                    continue
                self._cond.wait(left)
            else:
                return
        self.finish(message)

    def _listening(self) -> bool:
        return self._compile_start in self._handler.start_callbacks

    def _listen(self) -> None:
        self._handler.register_start_callback(self._compile_start)
        self._handler.register_end_callback(self._compile_end)

    def __enter__(self) -> Watch:
        import torch._dynamo

        self._handler = torch._dynamo.callback_handler
        self._listen()
        with self._cond:
            self._change()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for callbacks, callback in ((self._handler.start_callbacks, self._compile_start),
                                    (self._handler.end_callbacks, self._compile_end)):
            if callback in callbacks:
                callbacks.remove(callback)
        with self._cond:
            self._done = True
            faulthandler.cancel_dump_traceback_later()
            self._cond.notify_all()
        self._thread.join()


class _Unwatched:
    def first_call_done(self) -> None:
        pass


@contextlib.contextmanager
def watched(device: str, eager_s: float, *, what: str) -> Iterator[Watch | _Unwatched]:
    """Watch the body (a variant's section under the compile lock on `device`, whose eager call took
    `eager_s`; `what` names its call in the message) when a `finish` is armed; else nothing."""
    from tuner.measure.compile_cap import armed_cap

    finish = _FINISH[0]
    if finish is None:
        yield _Unwatched()
        return
    cap = armed_cap()
    with Watch(finish, what=what, run_s=max(RUN_FLOOR_S, RUN_FACTOR * eager_s), eager_s=eager_s,
               cap_s=None if cap is None else cap.seconds, first_run_bounded=device == "cpu") as watch:
        yield watch
