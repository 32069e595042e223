"""A zygote: one interpreter that imports what a trial needs once, then forks a spare per trial.

The zygote is `python -m tuner.workers.trial_process --zygote PARENT`, spawned (never forked) in
its own session and folder. It imports torch, Dynamo, Inductor and the trial code in steps under
the node's compile lock held shared (`trial_process.import_for_trials`, which on a CPU-only torch
also registers Inductor's CPU patterns: symbolic traces on fake tensors), has run no model, no
tensor op on data and no CUDA call and started no thread pool, and then only forks: a line "fork FOLDER" on its
stdin makes a child that leads its own session, works in FOLDER, dies with the zygote, and reads
"JOB\\nRESULT\\n" from FOLDER's `job.fifo` (made and held open by the parent); from there it is
that job's trial process, exactly like a spawned one. The zygote answers "forked PID" and, when
the child ends, "exit PID CODE" (Popen's returncode: minus the signal number when killed).

Forking costs milliseconds where an import costs 5-7 s of a core, and a fork's memory is the
zygote's until written. What a fork could carry over, it does not here: no OpenMP pool, CUDA
context or compile-worker pool exists yet (each starts in the child, as in a spawned process);
the one native thread the imports start, OpenBLAS's idle server (numpy's, which torch imports),
is shut down by OpenBLAS's own fork handler and restarts in the child on its first BLAS call;
Python's `random` reseeds in the child, and the child seeds torch's CPU generator from the OS as
a spawned process does. `tests/workers/test_spares.py` runs the same trials
forked and spawned and compares them.

`Zygote` is the parent's end: `fork` gives a `Forked` handle at once (Popen's `pid`, `poll`,
`wait`, and `stdin`, the FIFO's write end), its pid known when the zygote has forked it.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import IO, Callable, Mapping

from tuner.workers.lifeline import die_with_parent

ZYGOTE_FLAG = "--zygote"    # trial_process's argument: import, then fork spares on request
JOB_FIFO = "job.fifo"       # in a spare's folder: where its job's paths arrive


# --- in the zygote process ---------------------------------------------------------------------

def serve_forks(run_child: Callable[[Path], int]) -> int:
    """Fork a child per "fork FOLDER" line on stdin; the child calls `run_child(FOLDER)` in its own
    session and exits with what it returns. Report "forked PID" and "exit PID CODE" on stdout.
    At the end of stdin, fork no more, wait for the children, and return 0."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)    # a handler, so that the wakeup fd is written
    signal.set_wakeup_fd(wake_w)
    children: set[int] = set()
    pending, reading = b"", True
    while reading or children:
        ready = select.select([0, wake_r] if reading else [wake_r], [], [])[0]
        if wake_r in ready:
            while _drain(wake_r):
                pass
        _reap(children)
        if 0 in ready:
            data = os.read(0, 65536)
            reading = bool(data)
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                verb, _, folder = line.decode().partition(" ")
                if verb == "fork":
                    pid = _fork(Path(folder), run_child, (wake_r, wake_w))
                    children.add(pid)
                    os.write(1, f"forked {pid}\n".encode())
    return 0


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _reap(children: set[int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        os.write(1, f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


def _fork(folder: Path, run_child: Callable[[Path], int], wakeup: tuple[int, int]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()      # nothing of the zygote's is written twice
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:    # the child: never returns into the zygote's loop
        code = _child(folder, run_child, zygote, wakeup)
    except BaseException:   # a bug: said on its stderr, and it exits 1
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _child(folder: Path, run_child: Callable[[Path], int], zygote: int, wakeup: tuple[int, int]) -> int:
    """Make the fork a process of its own, as a spawned one would start, then run `run_child`."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wakeup:
        os.close(fd)
    os.setsid()
    torch = sys.modules.get("torch")
    if torch is not None:       # a spawned process seeds torch's CPU generator from the OS: so does a fork
        torch.default_generator.seed()
    die_with_parent(zygote)
    try:
        os.chdir(folder)
    except FileNotFoundError:   # the pool let it go before it was forked
        return 0
    null = os.open(os.devnull, os.O_RDWR)
    err = os.open("stderr.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    for target, fd in ((0, null), (1, null), (2, err)):
        os.dup2(fd, target)
    return run_child(folder)


def read_job(folder: Path) -> tuple[str, str] | None:
    """The child's job: JOB and RESULT paths from its FIFO; None when the parent closed it first."""
    fd = os.open(folder / JOB_FIFO, os.O_RDONLY | os.O_NONBLOCK)   # never blocks on opening
    os.set_blocking(fd, True)                                      # blocks on reading, until EOF
    with os.fdopen(fd) as fifo:
        job, result = fifo.readline().strip(), fifo.readline().strip()
    return (job, result) if job and result else None


# --- in the parent -------------------------------------------------------------------------------

class Forked:
    """A spare the zygote forks: Popen's `pid`, `poll`, `wait` for a process that is not our child.

    `pid` is None until the zygote has forked it; `stdin` is the write end of its job FIFO. Its
    returncode comes from the zygote; when the zygote dies, so do its children (their parent-death
    signal), and their returncode is -SIGKILL."""

    def __init__(self, stdin: IO[str]):
        self.stdin = stdin
        self.pid: int | None = None
        self.returncode: int | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("trial process", timeout)
        return self.returncode

    def _end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class Zygote:
    """A zygote process, spawned in a folder made under `root` with environment `env` (None: ours)."""

    def __init__(self, root: str, env: Mapping[str, str] | None):
        self.folder = Path(tempfile.mkdtemp(prefix="tuner-zygote-", dir=root))
        self.stderr = open(self.folder / "stderr.txt", "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "tuner.workers.trial_process", ZYGOTE_FLAG,
                                      str(os.getpid())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     cwd=self.folder, env=None if env is None else dict(env),
                                     start_new_session=True, text=True, bufsize=1)
        self.forked_any = False
        self._lock = threading.Lock()
        self._asked: deque[Forked] = deque()
        self._children: dict[int, Forked] = {}
        self._ended = False
        self._reader = threading.Thread(target=self._read, name="tuner-zygote", daemon=True)
        self._reader.start()

    def alive(self) -> bool:
        return not self._ended and self.proc.poll() is None

    def fork(self, folder: Path) -> Forked:
        """A spare working in `folder` (which must exist), its job FIFO made there and held open."""
        fifo = folder / JOB_FIFO
        os.mkfifo(fifo)
        handle = Forked(open(os.open(fifo, os.O_RDWR), "w"))    # O_RDWR: opening never waits for the child
        with self._lock:
            if not self._ended:
                try:
                    self.proc.stdin.write(f"fork {folder}\n")
                    self.proc.stdin.flush()
                    self._asked.append(handle)
                    return handle
                except OSError:     # it died; its reader ends every handle
                    pass
        handle._end(-signal.SIGKILL)
        return handle

    def retire(self) -> None:
        """Ask for no more forks: it waits for its children, then exits."""
        with self._lock:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def kill(self) -> None:
        """SIGKILL the group of each child it forked (a trial's compile workers included; the
        zygote's death alone would end the child only), then its own; reap it, remove its folder."""
        with self._lock:
            pids = [*self._children, self.proc.pid]
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.reap()

    def reap(self) -> None:
        """After it ended: wait for it, close our ends, remove its folder."""
        self.proc.wait()
        self._reader.join()
        self.retire()
        self.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _read(self) -> None:
        for line in self.proc.stdout:
            verb, *fields = line.split()
            with self._lock:
                if verb == "forked":
                    handle = self._asked.popleft()
                    handle.pid = int(fields[0])
                    self._children[handle.pid] = handle
                    self.forked_any = True
                elif verb == "exit":
                    self._children.pop(int(fields[0]))._end(int(fields[1]))
        with self._lock:        # it ended: so did its children (their parent-death signal)
            self._ended = True
            for handle in [*self._asked, *self._children.values()]:
                handle._end(-signal.SIGKILL)
            self._asked.clear()
            self._children.clear()
        self.proc.stdout.close()
