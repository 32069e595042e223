"""A process's tie to the one that started it (Linux's parent-death signal)."""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Get SIGKILL when the process that started us dies (a killed Ray worker, a killed driver).

    The trial runs in its own session (so a deadline can kill its whole group), which also
    means nothing else would end it: an orphaned hang would sleep on. Linux only.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:      # the parent died before prctl took effect
        os._exit(1)
