"""`tuner dashboard MODEL`: the stored studies of a model file in optuna-dashboard.

It captures the model file's workload as `tuner best` does, reads its stored trials from the
database (read-only) and writes them to an Optuna journal file, one Optuna study per stored
study (`tuner.report.study_export`). Then it serves that journal with optuna-dashboard, bound to
127.0.0.1 only, until Ctrl-C or SIGTERM (exit 0); `--export-only` stops after writing the journal, which
`optuna-dashboard <journal>` serves anywhere. optuna-dashboard is the optional extra `dashboard`.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.cli.common import add_command, add_db_option
from tuner.errors import TunerError, UsageError
from tuner.settings import Settings

if TYPE_CHECKING:
    from tuner.storage import StudyInfo, TrialRecord

HOST = "127.0.0.1"     # never another interface: the dashboard has no authentication
REFRESH_S = 5.0       # how often a served dashboard re-reads the database
INSTALL = "pip install '.[dashboard]' in the tuner checkout (or: pip install optuna-dashboard)"


def add_dashboard_parser(subparsers: Any) -> None:
    """Add `dashboard` to the CLI's subcommands (called from `tuner.cli.build_parser`)."""
    p = add_command(subparsers, "dashboard", cmd_dashboard,
                    help="show the stored studies of a model file in optuna-dashboard, on 127.0.0.1")
    p.add_argument("model", help="Python file defining get_model() and get_inputs()")
    add_db_option(p)
    p.add_argument("--journal", metavar="FILE", default=None,
                   help="Optuna journal file to write, replacing it (default: <model name>-dashboard.log here)")
    p.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1 to serve on (default: 8080)")
    p.add_argument("--export-only", action="store_true",
                   help="write the journal and stop; serve it later with: optuna-dashboard FILE")


def cmd_dashboard(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.search import prepare_target
    from tuner.storage import Store

    if not args.export_only and not _dashboard_installed():
        raise UsageError(f"optuna-dashboard is not installed; {INSTALL}; or write the journal only: "
                         f"tuner dashboard {args.model} --export-only")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port {args.port} is not a port number; use one from 1 to 65535")
    target = prepare_target(args.model)
    with Store.open(settings.db_url, readonly=True) as store:
        rows = store.trials_for_workload(target.workload.key, target.platform.key)
        where = store.safe_url
    if not rows:
        print(f"no stored trials for {args.model} on this platform; run: tuner search {args.model}", file=sys.stderr)
        return 1
    journal = Path(args.journal or f"{Path(args.model).stem}-dashboard.log")
    try:
        studies = write_journal(rows, journal, model=Path(args.model).stem, database=where)
    except OSError as exc:
        raise TunerError(f"cannot write the journal {journal} ({exc.strerror or exc}); "
                         f"choose a writable --journal path") from None
    print(f"wrote {journal}: {studies} stud{'y' if studies == 1 else 'ies'}, {len(rows)} trials")
    if args.export_only:
        print(f"serve it with: optuna-dashboard {journal}")
        return 0
    print(f"optuna-dashboard on http://{HOST}:{args.port}/, following the database (Ctrl-C stops it)",
          flush=True)
    follow = _Follow(settings.db_url, target.workload.key, target.platform.key, journal,
                     model=Path(args.model).stem, seen=_fingerprint(rows))
    _serve(journal, args.port, follow)
    return 0


def _fingerprint(rows: "list[tuple[StudyInfo, TrialRecord]]") -> tuple[tuple[int, int, str], ...]:
    """What identifies the stored trials: a new or re-measured trial changes it."""
    return tuple(sorted((study.id, r.number, r.measurement.status.value) for study, r in rows))


class _Follow:
    """Re-reads the model's stored trials (read-only) and, when they changed, writes the journal
    anew: so the dashboard follows a search that is still running."""

    def __init__(self, url: str, workload_key: str, platform_key: str, journal: Path, *, model: str,
                 seen: tuple[tuple[int, int, str], ...]):
        self.url, self.keys, self.journal, self.model, self.seen = url, (workload_key, platform_key), journal, model, seen

    def __call__(self) -> bool:
        """True when the journal was rewritten; a database or file problem keeps the last one."""
        from tuner.storage import Store

        try:
            with Store.open(self.url, readonly=True) as store:
                rows = store.trials_for_workload(*self.keys)
                where = store.safe_url
            if _fingerprint(rows) == self.seen:
                return False
            write_journal(rows, self.journal, model=self.model, database=where)
        except (TunerError, OSError) as exc:
            print(f"warning: the dashboard keeps the trials it has; reading the database failed: {exc}",
                  file=sys.stderr)
            return False
        self.seen = _fingerprint(rows)
        return True


def write_journal(rows: "list[tuple[StudyInfo, TrialRecord]]", journal: Path, *, model: str, database: str) -> int:
    """Write one Optuna study per stored study of `rows` to the journal file `journal`, named
    "<model> study <id>", replacing the file whole (written beside it, then renamed, so a reader
    never sees half of it). Returns the number of studies."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from tuner.report import optuna_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    partial = journal.with_name(f".{journal.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    storage = JournalStorage(JournalFileBackend(str(partial)))
    studies = {study.id: study for study, _ in rows}
    try:
        for study_id, info in sorted(studies.items()):
            study = optuna_study([r for s, r in rows if s.id == study_id], name=f"{model} study {study_id}",
                                 storage=storage)
            for key, value in _study_attrs(info, database).items():
                study.set_user_attr(key, value)
        os.replace(partial, journal)
    finally:
        partial.unlink(missing_ok=True)
    return len(studies)


def _study_attrs(info: "StudyInfo", database: str) -> dict[str, Any]:
    return {"sampler": info.sampler, "seed": info.seed, "trials_requested": info.trials_requested,
            "created_at": info.created_at.isoformat(), "user": info.user, "host": info.host,
            "tuner_version": info.tuner_version, "torch_version": info.torch_version,
            "workload_key": info.workload_key, "platform_key": info.platform_key, "database": database}


def _dashboard_installed() -> bool:
    try:
        import optuna_dashboard  # noqa: F401
    except ImportError:
        return False
    return True


def _serve(journal: Path, port: int, refresh: Callable[[], bool]) -> None:
    """Serve the journal with optuna-dashboard's WSGI app until Ctrl-C or SIGTERM; every
    REFRESH_S seconds `refresh()` may rewrite the journal, and the server then serves the new one.

    Requests are handled in a thread of their own, so that the interrupt always reaches this
    one: raised inside a request (as with `optuna_dashboard.run_server`), the WSGI handler
    would swallow it as a failed request and the server would never stop.
    """
    from wsgiref.simple_server import make_server

    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna_dashboard import wsgi

    def app() -> Any:
        return wsgi(JournalStorage(JournalFileBackend(str(journal))))

    try:
        server = make_server(HOST, port, app())
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise TunerError(f"port {port} on {HOST} is in use; pick another: --port {port + 1}") from None
    with server:
        thread = threading.Thread(target=server.serve_forever, name="optuna-dashboard", daemon=True)
        thread.start()
        try:
            last = time.monotonic()
            while thread.is_alive():
                thread.join(0.5)
                if time.monotonic() - last >= REFRESH_S:
                    if refresh():
                        server.set_app(app())      # a fresh storage reads the rewritten journal
                    last = time.monotonic()
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()
