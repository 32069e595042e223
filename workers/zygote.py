"""A zygote: one interpreter that imports what a trial needs once, then forks a spare per trial.

The zygote is `python -m tuner.workers.trial_process --zygote PARENT COMMANDS REPORTS`, spawned
(never forked) in its own session and folder. It imports torch, Dynamo, Inductor and the trial
code in steps under the node's compile lock held shared (`trial_process.import_for_trials`, which
on a CPU-only torch also registers Inductor's CPU patterns: symbolic traces on fake tensors), has
run no model, no tensor op on data and no CUDA call and started no thread pool, and then only
forks. Its protocol has a channel of its own, two pipes whose descriptor numbers it gets on its
command line (COMMANDS from the parent, REPORTS to it), never stdin and stdout, which everything
the interpreter runs shares (a site hook that prints, Inductor's ISA probe). A line "fork FOLDER"
makes a child that leads its own session, works in FOLDER, dies with the zygote, and reads
"JOB\\nRESULT\\n" from FOLDER's `job.fifo` (made and held open by the parent); from there it is
that job's trial process, exactly like a spawned one. The zygote answers "forked PID"; when the
child ends it kills the child's process group before reaping it (`workers/groups.py`: until then
the pid is the child's alone), then answers "exit PID CODE" (Popen's returncode: minus the signal
number when killed). "kill PID" SIGKILLs the group of a child it has not reaped; "retire", or the
end of COMMANDS, stops the forking: it exits once its children have ended.

Forking costs milliseconds where an import costs 5-7 s of a core, and a fork's memory is the
zygote's until written. What a fork could carry over, it does not here: no OpenMP pool, CUDA
context or compile-worker pool exists yet (each starts in the child, as in a spawned process);
the one native thread the imports start, OpenBLAS's idle server (numpy's, which torch imports),
is shut down by OpenBLAS's own fork handler and restarts in the child on its first BLAS call;
Python's `random` reseeds in the child, and the child seeds torch's CPU generator from the OS as
a spawned process does. `tests/workers/test_spares.py` runs the same trials
forked and spawned and compares them.

`Zygote` is the parent's end: `fork` gives a `Forked` handle at once (Popen's `pid`, `poll`,
`wait`, `kill`, and `stdin`, the FIFO's write end), its pid known when the zygote has forked it.
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
import time
from collections import deque
from pathlib import Path
from typing import IO, Callable, Mapping

from tuner.workers.groups import children_of, kill_group
from tuner.workers.lifeline import die_with_parent

ZYGOTE_FLAG = "--zygote"    # trial_process's argument: import, then fork spares on request
JOB_FIFO = "job.fifo"       # in a spare's folder: where its job's paths arrive
KILL_WAIT_S = 10.0          # after asking the zygote to kill a child: how long to wait for its end
STDERR_TAIL = 2000          # of a zygote that ended before forking anything: what of its stderr to keep


# --- in the zygote process ---------------------------------------------------------------------

def serve_forks(run_child: Callable[[Path], int], commands: int, reports: int) -> int:
    """Serve the protocol (module docstring): read commands from descriptor `commands`, write
    reports to `reports`; a forked child calls `run_child(FOLDER)` in its own session and exits
    with what it returns. After "retire" or at the end of the commands, fork no more, wait for
    the children (still killing on request), and return 0."""
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)    # a handler, so that the wakeup fd is written
    signal.set_wakeup_fd(wake_w)
    children: set[int] = set()
    pending, reading, retired = b"", True, False
    inherited = (wake_r, wake_w, commands, reports)
    while not retired or children:
        ready = select.select([commands, wake_r] if reading else [wake_r], [], [])[0]
        if wake_r in ready:
            while _drain(wake_r):
                pass
        _reap(children, reports)
        if commands in ready:
            data = os.read(commands, 65536)
            reading = bool(data)
            retired = retired or not reading
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                verb, _, argument = line.decode(errors="replace").partition(" ")
                if verb == "fork" and not retired:
                    pid = _fork(Path(argument), run_child, inherited)
                    children.add(pid)
                    os.write(reports, f"forked {pid}\n".encode())
                elif verb == "kill" and argument.isdigit() and int(argument) in children:
                    _kill_child(int(argument))
                elif verb == "retire":
                    retired = True
    return 0


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _kill_child(pid: int) -> None:
    """SIGKILL our unreaped child `pid` and its group (a child that has not reached setsid yet is
    in ours, and its group number names no group: hence the child itself too)."""
    kill_group(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(children: set[int], reports: int) -> None:
    """For each child that has ended: kill its group while it is a zombie, reap it, report it."""
    for pid in list(children):
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            continue
        kill_group(pid)     # its compile workers and compilers: the pid is still the child's
        _, status = os.waitpid(pid, 0)
        children.discard(pid)
        os.write(reports, f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


def _fork(folder: Path, run_child: Callable[[Path], int], inherited: tuple[int, ...]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()      # nothing of the zygote's is written twice
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:    # the child: never returns into the zygote's loop
        code = _child(folder, run_child, zygote, inherited)
    except BaseException:   # a bug: said on its stderr, and it exits 1
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _child(folder: Path, run_child: Callable[[Path], int], zygote: int, inherited: tuple[int, ...]) -> int:
    """Make the fork a process of its own, as a spawned one would start, then run `run_child`."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in inherited:    # the zygote's wakeup pipe and protocol: none of the child's business
        if fd > 2:
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
    """A spare the zygote forks: Popen's `pid`, `poll`, `wait` and `kill` for a process that is
    not our child.

    `pid` is None until the zygote has forked it; `stdin` is the write end of its job FIFO. Its
    returncode comes from the zygote, which killed its group before reaping it; when the zygote
    dies, so do its children (their parent-death signal), and their returncode is -SIGKILL."""

    def __init__(self, stdin: IO[str], zygote: "Zygote"):
        self.stdin = stdin
        self.pid: int | None = None
        self.returncode: int | None = None
        self.doomed = False         # killed before it was forked: the zygote kills it once it is
        self.zygote = zygote
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("trial process", timeout)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it and its group, through its zygote (the only process that can tell its pid
        from a reused one) and wait for its end; one not forked yet is killed once it is. A zygote
        that does not report the end within KILL_WAIT_S is killed, and with it the child."""
        if self.zygote.kill_child(self) and not self._ended.wait(KILL_WAIT_S):
            self.zygote.kill()

    def _end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class Zygote:
    """A zygote process, spawned in a folder made under `root` with environment `env` (None: ours)."""

    def __init__(self, root: str, env: Mapping[str, str] | None):
        self.started = time.monotonic()
        self.folder = Path(tempfile.mkdtemp(prefix="tuner-zygote-", dir=root))
        self.stderr = open(self.folder / "stderr.txt", "w+")
        commands, self._commands_w = os.pipe()
        self._reports_r, reports = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "tuner.workers.trial_process", ZYGOTE_FLAG,
                                          str(os.getpid()), str(commands), str(reports)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                         pass_fds=(commands, reports), cwd=self.folder,
                                         env=None if env is None else dict(env), start_new_session=True)
        finally:
            os.close(commands)
            os.close(reports)
        self._commands = os.fdopen(self._commands_w, "w", buffering=1)
        self.forked_any = False
        self.failure: str | None = None     # after `reap`: its stderr's tail, when it forked nothing
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
        handle = Forked(open(os.open(fifo, os.O_RDWR), "w"), self)    # O_RDWR: opening never waits for the child
        with self._lock:
            if not self._ended and self._send(f"fork {folder}"):
                self._asked.append(handle)
                return handle
        handle._end(-signal.SIGKILL)
        return handle

    def kill_child(self, handle: Forked) -> bool:
        """Have the zygote SIGKILL `handle`'s child and its group, or, not forked yet, as soon as
        it is; whether the zygote was asked now (False: it ended already, or is not forked yet)."""
        with self._lock:
            if handle.returncode is not None:
                return False
            if handle.pid is None:
                handle.doomed = True
                return False
            return self._send(f"kill {handle.pid}")

    def retire(self) -> None:
        """Ask for no more forks: it waits for its children (still killing one on request), then exits."""
        with self._lock:
            self._send("retire")

    def kill(self) -> None:
        """SIGKILL every child it forked, each with its group (a trial's compile workers included;
        the zygote's death alone would end the child only), then its own group; reap it, remove
        its folder. It is stopped first: a stopped zygote reaps none of its children, so each pid
        found among them is that child's, not a reused one."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)
            try:        # until it has stopped: a reaping under way in it ends first
                os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
            except ChildProcessError:   # reaped meanwhile (`alive`): its children were orphaned, and died
                pass
            for pid in children_of(self.proc.pid):
                kill_group(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            kill_group(self.proc.pid)
        self.reap()

    def reap(self) -> None:
        """After it ended: wait for it, close our ends, keep its stderr's tail when it forked
        nothing (`failure`), remove its folder. Once; later calls wait for the first."""
        self.proc.wait()
        self._reader.join()
        with self._lock:
            if self.stderr.closed:
                return
            try:
                self._commands.close()
            except OSError:
                pass
            if not self.forked_any:
                self.stderr.seek(0)
                self.failure = self.stderr.read()[-STDERR_TAIL:]
            self.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _send(self, line: str) -> bool:
        """Write a command (the caller holds the lock); False when the zygote is gone."""
        try:
            self._commands.write(line + "\n")
            self._commands.flush()
            return True
        except (OSError, ValueError):   # it died (its reader ends every handle), or we retired it
            return False

    def _read(self) -> None:
        try:
            with os.fdopen(self._reports_r, errors="replace") as reports:
                for line in reports:
                    self._report(line.split())
        finally:
            with self._lock:        # it ended: so did its children (their parent-death signal)
                self._ended = True
                for handle in [*self._asked, *self._children.values()]:
                    handle._end(-signal.SIGKILL)
                self._asked.clear()
                self._children.clear()

    def _report(self, fields: list[str]) -> None:
        """One line of the zygote's reports; a line that is not one of them is passed over."""
        if not fields or not all(field.lstrip("-").isdigit() for field in fields[1:]):
            return
        verb, numbers = fields[0], [int(field) for field in fields[1:]]
        with self._lock:
            if verb == "forked" and len(numbers) == 1 and self._asked:
                handle = self._asked.popleft()
                handle.pid = numbers[0]
                self._children[handle.pid] = handle
                self.forked_any = True
                if handle.doomed:
                    self._send(f"kill {handle.pid}")
            elif verb == "exit" and len(numbers) == 2 and numbers[0] in self._children:
                self._children.pop(numbers[0])._end(numbers[1])

