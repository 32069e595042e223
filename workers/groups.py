"""A trial process's process group, ended whole when the process ends, never another's.

Each trial process, spawned or forked, leads its own session and so its own process group, and
whatever it starts is in that group: Inductor's compile workers, the C++ compiler's driver and
the `cc1plus` under it. A trial process that ends (its result written, a crash, its deadline,
a cancel) takes its group with it: otherwise a compile the adaptive cap stopped in the main
thread goes on in the compile workers, and `subprocess.run`, interrupted, kills `gcc` but not its
`cc1plus`, which would hold a core and no lock while the next trial's timed section holds the
node.

The group is killed by the process's parent before it reaps it. Until then the process, alive
or a zombie, holds its pid, and Linux reuses no pid that still names a process or a group, so
`killpg` on that number reaches the trial's group and nothing else; after the reaping it could
reach a stranger. `Spawned` does this for a process we spawned (`wait_unreaped`: its end, seen
without reaping it); the zygote does it for its forks (`workers/zygote.py`); where the parent
died first (a Ray worker killed by a forced cancel), the trial's guard does it
(`lifeline.guard_group`).
"""
from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import threading
import time

POLL_S = 0.02       # where no pidfd can tell us: how often to look whether the process ended


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid` (nothing when none is left). Only for the group of
    a process the caller has not reaped: the module docstring."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def children_of(pid: int) -> list[int]:
    """The pids whose parent is `pid` (Linux: read from /proc; elsewhere none). Safe to signal
    only while `pid` can reap none of them (stopped: `Zygote.kill`)."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    found = []
    for name in names:
        try:
            with open(f"/proc/{name}/stat") as stat:
                if int(stat.read().rpartition(")")[2].split()[1]) == pid:      # the name may hold spaces
                    found.append(int(name))
        except (OSError, IndexError, ValueError):       # gone meanwhile
            continue
    return found


def wait_unreaped(pid: int, timeout: float | None) -> bool:
    """Wait until our child `pid` has ended, without reaping it (it stays a zombie and keeps its
    pid); whether it ended within `timeout` seconds (None: no limit)."""
    try:
        fd = os.pidfd_open(pid)          # Linux 5.3+: readable once the process has ended
    except (AttributeError, OSError):
        return _poll_unreaped(pid, timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))))
    finally:
        os.close(fd)


def _poll_unreaped(pid: int, timeout: float | None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:        # not ours to wait for: nothing to wait on
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


class Spawned:
    """A trial process we spawned in a session of its own: Popen's `pid` and `wait`, and `kill`,
    each of which ends the process's whole group before reaping it. One thread waits and reaps;
    any thread may `end_group` (the local executor's cancel)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.pid = proc.pid
        self._lock = threading.Lock()      # a group kill never follows the reaping

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status (Popen's returncode) once it has ended, its group killed and it reaped;
        TimeoutExpired when it runs on past `timeout`."""
        if self.proc.returncode is None and not wait_unreaped(self.pid, timeout):
            raise subprocess.TimeoutExpired(self.proc.args, timeout)
        self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL its group, itself included, and reap it."""
        with self._lock:
            if self.proc.returncode is None:
                kill_group(self.pid)
            self.proc.wait()

    def end_group(self) -> None:
        """SIGKILL its group, itself included, unless it was reaped already; the waiting thread reaps it."""
        with self._lock:
            if self.proc.returncode is None:
                kill_group(self.pid)
