"""What `tuner.measure.core.prepare` hands back: a config ready to time, or why it cannot be timed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tuner.trial import Status

__all__ = ["Rejected", "Runner"]


@dataclass(frozen=True, eq=False)
class Runner:
    """A model file's model, compiled as asked and verified against eager: ready to time.

    `call` runs it once on the file's inputs, `sync` waits for its device, `compile_s` is its
    first call (tracing, compiling and one run; None for eager). `note` is the accuracy measured
    for a precision other than fp32 (None otherwise).
    """

    call: Callable[[], Any]
    sync: Callable[[], None]
    device: str
    compile_s: float | None
    note: str | None = None


@dataclass(frozen=True)
class Rejected:
    """A config that cannot be timed: its first call failed (COMPILE_ERROR or RUNTIME_ERROR, CRASHED
    when it ran out of memory, then `out_of_memory`; `message` is the headline, then the traceback)
    or its output differs from eager (WRONG_RESULT)."""

    status: Status
    message: str
    out_of_memory: bool = False

    @property
    def headline(self) -> str:
        return self.message.partition("\n")[0]
