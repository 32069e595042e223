"""This process's own folder in the system's temporary folder, which does not outlive it.

A process that runs trials without a scratch folder of its own (a Ray worker: `run_isolated`
with no `scratch`, and its pool of spares, `spares.process_spares`) makes them under
`process_folder()`. It is removed when the process exits; a process killed with SIGKILL (a Ray
worker whose task was cancelled by force) runs no exit handler, so the folder is named after its
owner, `tuner-proc-NS-PID-START-*` (NS: its pid namespace, PID: its pid there, START: when it
started, in clock ticks since boot, /proc/PID/stat), and the next `process_folder()` on the
machine removes the folders whose owner is gone (`sweep`): no process of that pid, or one that
started at another time (a reused pid). Only folders of this user and of our pid namespace (a
container sharing the temporary folder numbers its processes otherwise), never a symbolic link,
and only where /proc tells start times.
"""
from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

PREFIX = "tuner-proc-"

_FOLDER: list[str] = []


def process_folder() -> str:
    """This process's own folder (made, after a `sweep`, on first use; removed at exit)."""
    if not _FOLDER:
        sweep()
        started = start_time(os.getpid())
        owner = f"{_namespace()}-{os.getpid()}-{'x' if started is None else started}"
        folder = tempfile.mkdtemp(prefix=f"{PREFIX}{owner}-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _FOLDER.append(folder)
    return _FOLDER[0]


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot); None when there is no such process
    or no /proc to tell."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rpartition(")")[2].split()[19])    # field 22; the name may hold spaces
    except (OSError, IndexError, ValueError):
        return None


def sweep(root: str | None = None) -> list[str]:
    """Remove the folders `process_folder` made in `root` (None: the system's temporary folder)
    whose owner process is gone; the paths removed. Folders of other users, links, and folders
    whose owner cannot be told (no /proc) are left alone."""
    if start_time(os.getpid()) is None:          # no /proc: a live owner could not be told from a dead one
        return []
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}{_namespace()}-*"):
        owner = _owner(path.name)
        try:
            info = path.lstat()
        except OSError:
            continue
        if owner is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if start_time(owner[0]) != owner[1]:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def _namespace() -> str:
    """Our pid namespace's inode number ("x" where there is no /proc to tell)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "x"


def _owner(name: str) -> tuple[int, int] | None:
    """(pid, start time) from a folder's name, `tuner-proc-NS-PID-START-*`; None for another name."""
    pid, _, rest = name[len(PREFIX):].partition("-")[2].partition("-")
    started = rest.partition("-")[0]
    return (int(pid), int(started)) if pid.isdigit() and started.isdigit() else None
