"""What the kernel object needs from its decorator besides Triton's arguments, and the
process-wide switch of the gate's untuned runs (`untuned_launches`)."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tuner.kernels.bench import Timer

__all__ = ["TunerOptions", "untuned_depth", "untuned_launches"]

_untuned = [0]      # open untuned_launches() contexts, process-wide
_untuned_lock = threading.Lock()


@contextmanager
def untuned_launches() -> Iterator[None]:
    """While open, a launch whose key has no choice yet runs the kernel's first config, and
    chooses nothing: for runs whose dtypes or shapes the user never launches (the gate's
    float64 reference), which must not search, store or log a config. Process-wide."""
    with _untuned_lock:
        _untuned[0] += 1
    try:
        yield
    finally:
        with _untuned_lock:
            _untuned[0] -= 1


def untuned_depth() -> int:
    """How many `untuned_launches()` contexts are open (0: launches tune as usual)."""
    return _untuned[0]


@dataclass(frozen=True)
class TunerOptions:
    """What tuner adds to Triton's arguments: the search budget (None: every config of a
    list, 64 of a space), a tuner timer, the database URL (None: TUNER_DB, or the open
    `search_database`), and `cache_results` as given (the database is the cache)."""

    max_trials: int | None = None
    timer: Timer | None = None
    db: str | None = None
    cache_results: bool = False
