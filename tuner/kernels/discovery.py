"""Which `@tuner.autotune` kernels a model launches, and the configs they got: for `tuner search`.

    with discover_kernels(settings.db_url) as found:
        target = prepare_target(model_path)         # the model's eager runs launch its kernels
    for launch in found.launches():
        print(describe_launch(launch))

While `discover_kernels` is open, every `tuner.autotune` kernel declared without `db=` reads
and stores its configs in the given database (`tuner.kernels.search_database`), and every
key any kernel launches is logged once with its `KernelChoice` (a database hit or a search),
or with the error that choosing raised. Both are process-wide, for every thread.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.kernels.guarded_db import search_database
from tuner.text import key_values

if TYPE_CHECKING:
    from tuner.kernels.key import KernelSignature
    from tuner.kernels.search import KernelChoice

__all__ = ["KernelLaunch", "LaunchLog", "describe_launch", "discover_kernels", "note_launch"]


@dataclass(frozen=True)
class KernelLaunch:
    """One key a kernel launched with while a `LaunchLog` was open: the choice made for it,
    or, when `choice` is None, `error`, the first line of what choosing raised."""

    kernel_name: str
    signature: KernelSignature
    choice: KernelChoice | None
    error: str | None = None


class LaunchLog:
    """The keys every `tuner.autotune` kernel launched while it was open, each once, in the
    order of their first launch (the latest outcome of a key that failed, then launched)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._launches: dict[tuple[Any, ...], KernelLaunch] = {}

    def note(self, key: tuple[Any, ...], launch: KernelLaunch) -> None:
        with self._lock:
            self._launches[key] = launch

    def launches(self) -> tuple[KernelLaunch, ...]:
        with self._lock:
            return tuple(self._launches.values())


_open_logs: list[LaunchLog] = []


def note_launch(kernel: Any, device: str, signature: KernelSignature, choice: KernelChoice | None,
                error: str | None = None) -> None:
    """Called by `AutotunedKernel.run` at each launch (and when choosing fails); next to free
    when no log is open, as on every launch outside `tuner search`."""
    if not _open_logs:
        return
    launch = KernelLaunch(kernel.__name__, signature, choice, error)
    for log in tuple(_open_logs):
        log.note((id(kernel), signature, device), launch)


@contextmanager
def discover_kernels(db_url: str | None) -> Iterator[LaunchLog]:
    """Log the kernels launched while open; kernels without `db=` use `db_url` meanwhile
    (None: their own default)."""
    log = LaunchLog()
    with search_database(db_url):
        _open_logs.append(log)
        try:
            yield log
        finally:
            _open_logs.remove(log)


def describe_launch(launch: KernelLaunch) -> str:
    """One line: the kernel, its key arguments and dtypes, its config and where it came from."""
    name, args = launch.kernel_name, key_values(launch.signature.key_args)
    dtypes = launch.signature.dtype_text()
    choice = launch.choice
    if choice is None:
        return f"{name} ({args}; {dtypes}): not tuned: {launch.error}"
    head = f"{name} ({args}; {dtypes})"
    config = key_values(choice.config)
    if choice.origin == "only":
        return f"{head}: {config}, the only config after pruning, nothing benchmarked"
    if choice.origin == "database":
        return f"{head}: {config}, database hit, nothing benchmarked"
    latency = "" if choice.latency_ms is None else f", {choice.latency_ms:.4g} ms"
    stored = "stored" if choice.stored else "NOT stored (see the warning above)"
    return f"{head}: {config}, searched {choice.configs_tried} configs{latency}, {stored}"
