"""Shared fixtures. Helpers that tests import live in tests/helpers/ (a package).

PostgreSQL: `postgres_server` starts one throw-away cluster per test session on 127.0.0.1
(a free port, a data folder under the system temp folder, owned by the `postgres` user when
the tests run as root, because the server refuses to run as root), and deletes it at the
end. `postgres_url` gives each test a fresh, empty database on it. Without server binaries
the postgres tests are skipped with the reason; scripts/test.sh installs them, so CI runs them.

Authentication: the `postgres` superuser connects over TCP without a password (trust);
every other role must give its password (scram-sha-256), so tests of roles and passwords
exercise real authentication.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.register_assert_rewrite("helpers")   # tests/helpers/: its asserts (and exchange_data, a plugin) explain failures


def _share_inductor_cache() -> None:
    """Name one Inductor cache folder for every search the tests start: a search otherwise gives its
    trials a fresh cache folder of their own (tuner/workers/caches.py), and each test's first
    compiles would then be full C++ builds (28-45 s here) instead of the hits the suite's other
    searches left. A user's TORCHINDUCTOR_CACHE_DIR is honoured the same way, but not Inductor's
    own default folder (torch sets that one by itself), hence a folder beside it."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", default_cache_dir() + "-tuner-tests")


def _temp_folder_per_worker() -> None:
    """Give each pytest-xdist worker a temp folder of its own (TMPDIR), as if it ran on a machine of
    its own. The node's locks live in the temp folder (tuner/measure/node_lock.py), and with one
    folder the two workers' tests held each other back: a timed section of one waited for the
    other's compiles, and a faulty trial's hang holds the compile lock until its --timeout (seen:
    two lock holders released together, one of them 1.8 s late). Their local Ray sessions part too.
    Made like /tmp (world-writable, sticky): the postgres user makes its data folder in it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    folder = Path(tempfile.gettempdir()) / f"tuner-tests-{worker}"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o1777)
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None         # gettempdir() reads TMPDIR again


_share_inductor_cache()           # first: the cache folder stays the one both workers share
_temp_folder_per_worker()


def _sigint_reset(when: str) -> None:
    """Give this worker's main thread the SIGINT of a terminal's foreground job (Python's handler,
    unblocked) if it lost it, and say so."""
    import signal
    import warnings

    state = signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    if state != (signal.default_int_handler, False):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        warnings.warn(f"SIGINT was {state} {when}; reset")


@pytest.fixture(autouse=True)
def _sigint_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts and ends with the SIGINT of a foreground job, and a test (or a session
    fixture set up for it) that changed it is named. A worker whose SIGINT was ignored or blocked
    passed that on, through exec, to every process its later tests started (the interrupt tests'
    searches then ignored their Ctrl-C) and turned its own Ctrl-C off."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _sigint_reset(f"before {request.node.nodeid}")
    yield
    _sigint_reset(f"after {request.node.nodeid}")


@pytest.fixture(autouse=True)
def _torch_threads_restored() -> Iterator[None]:
    """Put torch's thread count back after each test: a trial measured in the test process sets it
    (`MeasureSpec.threads`), and under pytest-xdist any later test of the same worker would
    otherwise see that count as the machine's."""
    import sys

    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None and before is not None and torch.get_num_threads() != before:
        torch.set_num_threads(before)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (scripts/test.sh runs two workers, --dist loadgroup): every Ray test
    runs in one worker, one at a time, so two local Ray clusters never start at once; and the
    slow tests go first, so that no long search starts last while the other worker idles."""
    for item in items:
        if item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tuner.db'}"


# The store contract suites run once per backend: a SQLite file and the PostgreSQL server below.
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL to an empty database of the backend under test (a SQLite file in a folder not yet made)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'tuner.db'}"
    return request.getfixturevalue(f"{request.param}_url")


def _postgres_bindir() -> Path | None:
    """The folder holding initdb and pg_ctl: Debian's newest, else whatever is on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


HBA = """\
local all all trust
host all postgres 127.0.0.1/32 trust
host all all 127.0.0.1/32 scram-sha-256
"""


@dataclass(frozen=True)
class PostgresServer:
    """A running throw-away cluster. `url(db, user, password)` builds a connection URL."""

    host: str
    port: int
    folder: Path

    def url(self, database: str = "postgres", *, user: str = "postgres",
            password: str | None = None) -> str:
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@{self.host}:{self.port}/{database}"

    def execute(self, *statements: str, database: str = "postgres") -> None:
        """Run statements as the superuser, in autocommit (CREATE DATABASE needs it)."""
        import psycopg2

        connection = psycopg2.connect(host=self.host, port=self.port, user="postgres",
                                      dbname=database, connect_timeout=10)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
        finally:
            connection.close()


def _as_postgres(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *command]
    return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(_quote, command))]


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    pytest.importorskip("psycopg2", reason="the PostgreSQL tests need psycopg2: "
                                           "pip install '.[postgres]'")
    bindir = _postgres_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found; install Debian's "
                    "`postgresql` package (scripts/test.sh does) to run the postgres tests")
    folder = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        import pwd

        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
    run = lambda *args: subprocess.run(_as_postgres([str(a) for a in args]), check=True,
                                       capture_output=True, text=True, timeout=120)
    try:
        run(bindir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync",
            "-E", "UTF8", "--locale", "C")
        (data / "pg_hba.conf").write_text(HBA)
        port = _start(run, bindir, data, folder)
    except subprocess.CalledProcessError as exc:
        log = folder / "log"
        detail = log.read_text()[-2000:] if log.exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {exc.stderr or exc.stdout} {detail}") from exc
    try:
        yield PostgresServer(host="127.0.0.1", port=port, folder=folder)
    finally:
        subprocess.run(_as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                     "-w", "stop"]), capture_output=True, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def _start(run, bindir: Path, data: Path, folder: Path) -> int:
    """Start the server on a free port; retry when another process took the port first."""
    for attempt in range(3):
        port = _free_port()
        options = (f"-k {folder} -c listen_addresses=127.0.0.1 -p {port} -c fsync=off "
                   f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        try:
            run(bindir / "pg_ctl", "-D", data, "-o", options, "-l", folder / "log", "-w",
                "-t", "60", "start")
            return port
        except subprocess.CalledProcessError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


RESET = ("DROP SCHEMA IF EXISTS public CASCADE",
         "CREATE SCHEMA public AUTHORIZATION pg_database_owner",
         "GRANT USAGE ON SCHEMA public TO PUBLIC")
_spare: list[str] = []     # emptied databases, handed out again (CREATE DATABASE takes ~1 s)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A URL to a fresh, empty database, as the superuser.

    Afterwards its connections are ended and its `public` schema is dropped and recreated,
    and the database is kept for a later test: an empty database at a tenth of the cost of
    CREATE DATABASE. A test that creates roles drops them itself (DROP OWNED BY, DROP ROLE).
    """
    if _spare:
        name = _spare.pop()
    else:
        name = f"t_{uuid.uuid4().hex[:16]}"
        postgres_server.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                f"WHERE datname = '{name}' AND pid <> pg_backend_pid()")
        postgres_server.execute(*RESET, database=name)
        _spare.append(name)


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs: a real file system that runs out of space (root only; skipped otherwise),
    in a folder the PostgreSQL server's user can reach."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    folder = Path(tempfile.mkdtemp(prefix="tuner-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        folder.rmdir()


@pytest.fixture
def inductor_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict]]:
    """Every call Inductor's compile_fx gets while the test runs (Dynamo reset around it): its
    patches, the live config, the graph's get_attr count, and `outer` (the caller passed
    config_patches: a backend's call, not Inductor's own re-entry while it freezes)."""
    import torch
    import torch._inductor.compile_fx as cfx

    calls, original = [], cfx.compile_fx

    def recording(gm, example_inputs, *args, **kwargs):
        from torch._inductor import config

        calls.append(dict(patches=dict(kwargs.get("config_patches") or {}), freezing=config.freezing,
                          max_fusion_size=config.max_fusion_size, outer=kwargs.get("config_patches") is not None,
                          get_attr=sum(n.op == "get_attr" for n in gm.graph.nodes)))
        return original(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", recording)
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()
