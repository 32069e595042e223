"""Allocators by name, resolved to the system's own libraries; glibc's malloc parameters.

A runtime knob names an allocator (`jemalloc`, `tcmalloc`), never a path: a preloaded library is
code, and a stored row may come from anyone with write access to a shared database. `library`
resolves a name through a fixed table of library file names, looked up only in the system's own
library folders, and accepts a file only when root owns it and its folder and no one else may
write either. Where none is found the name is not available here (`available`): the search leaves
it out with a note, the launcher refuses it with one line.

glibc's malloc serves large blocks with mmap and returns them on free until its dynamic threshold
moves up, which happens once the process has freed a large block: so the same compiled model runs
at another speed after other work freed memory (examples/resnet.py: about 14 ms a call in a process
that only runs it, 10.5 ms after eager calls). `mallopt` sets the thresholds explicitly, which turns
the dynamic adjustment off (`tuner.runtime.RuntimeConfig.pin_for_timing`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import stat
from pathlib import Path
from typing import Iterable


__all__ = ["LIBRARIES", "SYSTEM_LIBRARY_FOLDERS", "available", "glibc", "library", "loaded", "mallopt"]

# The file names each allocator's library goes by (Debian, Ubuntu, Fedora, Arch), best first.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
}
# Where the dynamic linker finds the system's libraries; never LD_LIBRARY_PATH or a user's folder.
SYSTEM_LIBRARY_FOLDERS = ("/usr/lib/{triplet}", "/lib/{triplet}", "/usr/lib64", "/lib64", "/usr/lib", "/lib",
                          "/usr/local/lib")


def _triplet() -> str:
    machine = os.uname().machine
    return f"{machine}-linux-gnu" if machine != "armv7l" else "arm-linux-gnueabihf"


def _trusted(path: Path) -> bool:
    """A regular file that root owns and no one else may write, in a folder of the same kind."""
    try:
        for item in (path, path.parent):
            info = os.stat(item)
            if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def library(name: str) -> Path | None:
    """The system's library for allocator `name` (a key of LIBRARIES), resolved to its real file;
    None when it is not installed, or not where and as the system keeps its libraries."""
    folders = [Path(f.format(triplet=_triplet())) for f in SYSTEM_LIBRARY_FOLDERS]
    for file in LIBRARIES.get(name, ()):
        for folder in folders:
            candidate = folder / file
            if candidate.exists() and _trusted(candidate.resolve()):
                return candidate.resolve()
    return None


def available(name: str) -> bool:
    return library(name) is not None


@functools.lru_cache(maxsize=1)
def glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has `mallopt` and `gnu_get_libc_version`); None otherwise."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version")):
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return libc


def mallopt(settings: Iterable[tuple[int, int]]) -> bool:
    """Set glibc's malloc parameters in this process; False (nothing set) off glibc or when one is refused."""
    libc = glibc()
    if libc is None:
        return False
    return all(libc.mallopt(param, value) == 1 for param, value in settings)


def loaded(name: str, maps: str = "/proc/self/maps") -> bool:
    """Whether allocator `name`'s library is mapped into this process (read from `maps`)."""
    files = LIBRARIES.get(name, ())
    try:
        text = Path(maps).read_text()
    except OSError:
        return False
    return any(os.path.basename(line.split()[-1]) in files or
               any(os.path.basename(line.split()[-1]).startswith(f + ".") for f in files)
               for line in text.splitlines() if "/" in line)
