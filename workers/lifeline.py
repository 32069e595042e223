"""A process's ties to its own life: it dies with the process that started it (Linux's
parent-death signal), and what it started dies with it (a guard on its process group)."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
# The guard: reads its stdin until the end (every write end closed: our process has ended, however
# it ended), then SIGKILLs its process group, itself included ("kill -9 0": every process of the group).
GUARD = ("/bin/sh", "-c", "read line; kill -9 0")
_GUARDS: list[tuple[int, subprocess.Popen]] = []     # the write end and the guard, held for our life


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


def guard_group() -> None:
    """Have this process's group killed when this process ends, however it ends (SIGKILL and the
    parent-death signal included), when it leads its group (else nothing: the group is not ours).

    A trial process's parent kills the trial's group once the trial has ended
    (`workers/groups.py`); this covers a parent that died first, such as a Ray worker killed by a
    forced cancel, whose trial process then dies of its parent-death signal while its compile
    workers and compilers would run on. The guard is `GUARD` in our group, reading a pipe whose
    write end only we hold (close-on-exec: no process we start holds it). Call it before
    starting anything."""
    if os.getpgid(0) != os.getpid():
        return
    read, write = os.pipe()
    try:
        guard = subprocess.Popen(GUARD, stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        os.close(read)
    _GUARDS.append((write, guard))
