"""The per-node measure lock: while a trial measures, nothing else of ours runs on the node.

It belongs to measurement (`tuner.measure`, `tuner.measure.confirm`); the executors only start the
processes that take it.

Compiles may overlap with each other, but a timed section holds the node's cores to itself:
compiles take the lock shared, measurements take it exclusive. A turnstile keeps a stream
of compiles from starving a waiting measurement: a measurement holds the turnstile while it
waits, and a compile passes through the turnstile before taking its shared lock.
Every trial process on a node (local pool or Ray) uses the same lock files.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator


def lock_path(name: str = "measure") -> Path:
    return Path(tempfile.gettempdir()) / f"tuner-{name}-{os.getuid()}.lock"


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def measure_lock() -> Iterator[None]:
    """Hold the node exclusively for a timed section (blocks until running compiles finish)."""
    with _flock(lock_path("turnstile"), fcntl.LOCK_EX), _flock(lock_path(), fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def compile_lock() -> Iterator[None]:
    """Hold the node shared while compiling: other compiles may run, measurements wait."""
    with _flock(lock_path("turnstile"), fcntl.LOCK_EX):
        pass
    with _flock(lock_path(), fcntl.LOCK_SH):
        yield
