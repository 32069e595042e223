"""The per-node measure lock: compiles may overlap, timings never do.

Every trial process on a node (local pool or Ray) takes this file lock around its
timed section, so parallel trials cannot corrupt each other's measurements.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path
from typing import Iterator


def lock_path() -> Path:
    return Path(tempfile.gettempdir()) / f"tuner-measure-{os.getuid()}.lock"


@contextlib.contextmanager
def measure_lock() -> Iterator[None]:
    """Hold the node's measure lock for the duration of the block (blocks until free)."""
    with open(lock_path(), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
