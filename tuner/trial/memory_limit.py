"""The per-trial memory cap, `--memory-limit`: parsed from the command line, applied inside
the trial process (standard library only, so it can be applied before torch loads).

The cap is RLIMIT_DATA (private writable memory, which Linux counts for anonymous mappings
since 4.7), not RLIMIT_AS: measured here on torch 2.13 CPU, a trial process holds about
220 MB of data after `import torch` and 370 MB after compiling a small MLP, but 1.0 GB of
address space (CUDA reserves far more address space than it uses; not measured here). Under
RLIMIT_DATA a tiny compile still runs at 450 MB, while an allocation past the cap fails at
once with MemoryError or torch's "DefaultCPUAllocator: can't allocate memory". Children
(Inductor's compile workers, the C++ compiler) inherit the cap, each for itself.
"""
from __future__ import annotations

import re
import resource

from tuner.errors import UsageError

RLIMIT = resource.RLIMIT_DATA
MIN_MB = 512          # importing torch and compiling a small model needs about 400 MB here
_SIZE = re.compile(r"(\d+)\s*(?:([MG])B?)?", re.IGNORECASE)


def parse_size_mb(text: str) -> int:
    """MB in a size such as "4G", "4GB", "512M", "512MB" or "512" (MB); UsageError otherwise."""
    found = _SIZE.fullmatch(text.strip())
    if not found:
        raise UsageError(f"--memory-limit must be a size such as 4G or 512M, got {text!r}")
    number, unit = int(found.group(1)), (found.group(2) or "M").upper()
    return number * 1024 if unit == "G" else number


def format_mb(mb: int) -> str:
    """`mb` as the flag would take it: "4G" when it is whole gigabytes, else "1536M"."""
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"


def apply_memory_limit(mb: int) -> None:
    """Cap this process (and what it starts) at `mb` MB of data (the soft limit, within the hard one)."""
    _, hard = resource.getrlimit(RLIMIT)
    want = mb * 2**20
    resource.setrlimit(RLIMIT, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


def limit_in_force() -> bool:
    """Whether this process runs under a data cap (the soft limit is finite)."""
    return resource.getrlimit(RLIMIT)[0] != resource.RLIM_INFINITY


# What a process that ran out of capped memory leaves on stderr when it dies before reporting:
# the dynamic loader's "cannot allocate memory for thread-local data" (a library loaded past the
# cap), C++'s bad_alloc, or Python's MemoryError outside any handler.
_OUT_OF_MEMORY = re.compile(r"cannot allocate memory|can't allocate memory|MemoryError|std::bad_alloc")


def out_of_memory_line(stderr: str) -> str | None:
    """The first line of `stderr` that says the process ran out of memory, stripped; None if none does."""
    return next((line.strip() for line in stderr.splitlines() if _OUT_OF_MEMORY.search(line)), None)


def exceeded(mb: int) -> str:
    """The headline of a trial that ran out of memory under `--memory-limit mb`."""
    return f"out of memory (the trial exceeded --memory-limit {format_mb(mb)})"
