"""The store: the only code that opens database sessions.

Every method runs in one `session_scope()`, which commits or rolls back and turns driver
errors into StorageError, and returns the frozen records of `records.py`, never ORM rows.
During a search the driver is the only writer; compile-time lookups open read-only stores.
The statements a method runs inside its session live beside it: `queries` (rows and records),
`snapshots` (an export's selection, an import's or merge's write), `write_access` (whether a
search may write here); the tables outside the Store's methods have their own modules
(`kernel_table`, `failures`, `warm_starts`, `training_data`).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from tuner.keys import GraphFingerprint, Platform, Workload
from tuner.storage import queries as q, snapshots, write_access
from tuner.storage.engine import WRITE, caller_bug, make_engine, storage_error
from tuner.storage.models import (BestConfigRow, BestHistoryRow, GraphRow, PlatformRow, StudyRow, TrialRow,
                                  WorkloadRow, utcnow)
from tuner.storage.records import ApplyReport, BestConfig, HistoryEntry, Snapshot, StudyInfo, TrialRecord
from tuner.storage.schema import check_revision, read_revision
from tuner.storage.urls import parse_url, safe_url


class Store:
    """A tuner database (SQLite file or PostgreSQL). Create one with `Store.open`."""

    def __init__(self, engine: Engine, url: str, *, readonly: bool) -> None:
        self._engine = engine
        self._write_engine = engine.execution_options(**WRITE)
        self._url = parse_url(url)
        self._readonly = readonly

    @classmethod
    def open(cls, url: str, *, readonly: bool = False, check_schema: bool = True,
             connect_timeout_s: float | None = None) -> "Store":
        """Open the database at `url` and read its schema revision before returning.

        `readonly` never creates or writes anything (SQLite opens `mode=ro`). With
        `check_schema`, a database that is not at this tuner's head revision is refused:
        SchemaOutdated (none or older; run `tuner db upgrade`) or SchemaTooNew (upgrade
        tuner). `connect_timeout_s` bounds the wait to connect (PostgreSQL) or for a lock
        (SQLite; default 5 s read-only, 10 minutes writable, so that a long import cannot
        make a search lose a trial it measured). Any other failure is a one-line StorageError.
        """
        engine = make_engine(url, readonly=readonly, timeout_s=connect_timeout_s)
        store = cls(engine, url, readonly=readonly)
        try:
            with store.session_scope() as session:
                have = read_revision(session.connection())
            if check_schema:
                check_revision(have, store.safe_url)
        except BaseException:
            store.close()
            raise
        return store

    @property
    def safe_url(self) -> str:
        """The URL with its password hidden; use it in every message."""
        return safe_url(self._url)

    @property
    def readonly(self) -> bool:
        return self._readonly

    def __repr__(self) -> str:
        return f"Store({self.safe_url!r}{', readonly' if self._readonly else ''})"

    def __getstate__(self) -> Any:
        raise TypeError("a Store cannot be pickled or sent to another process; "
                        "open one there with Store.open(url)")

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every pooled connection. The store is unusable afterwards."""
        self._engine.dispose()

    @contextmanager
    def session_scope(self, *, write: bool = False) -> Iterator[Session]:
        """The one session boundary: commit on success, roll back on any exception.

        `write=True` starts SQLite transactions with BEGIN IMMEDIATE (take the write lock
        first, waiting up to the busy timeout) and raises ReadOnlyDatabase on a read-only
        store. SQLAlchemy and driver errors leave as StorageError naming the safe URL; a
        value the driver cannot bind (say, params that are not JSON) is a caller's bug and
        leaves as the original TypeError or ValueError.
        """
        if write and self._readonly:
            raise write_access.opened_readonly(self._url)
        session = Session(self._write_engine if write else self._engine, expire_on_commit=False)
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            bug = caller_bug(exc)
            if bug is not None:
                raise bug from exc
            denied = write_access.permission_denied(exc, self._url)
            raise (denied or storage_error(exc, self._url)) from exc
        finally:
            session.close()   # rolls back whatever was not committed

    def ensure_platform(self, platform: Platform) -> None:
        """Store the platform if its key is new. Idempotent; safe under concurrent callers."""
        with self.session_scope(write=True) as session:
            q.ensure_platform(session, platform)

    def ensure_workload(self, workload: Workload) -> None:
        """Store the workload and its graphs if new. Idempotent; never changes stored graphs."""
        with self.session_scope(write=True) as session:
            q.ensure_workload(session, workload)

    def create_study(self, *, workload_key: str, platform_key: str, space_hash: str,
                     sampler: str, seed: int | None, trials_requested: int, user: str,
                     host: str, tuner_version: str, objectives: tuple[str, ...] = ("latency",),
                     prefer: str = "latency") -> StudyInfo:
        """Start a new study. The workload and platform must be stored first (ensure_*).
        The study records its platform's torch and triton versions, the objectives it
        minimises and the one preferred for the stored operating point."""
        with self.session_scope(write=True) as session:
            workload_id = q.id_of(session, WorkloadRow, workload_key,
                                  fix="call Store.ensure_workload first")
            platform = q.platform_of(session, platform_key)
            torch_version, triton_version = q.versions_of(platform)
            row = StudyRow(
                workload_id=workload_id, platform_id=platform.id,
                space_hash=space_hash, sampler=sampler, seed=seed,
                trials_requested=trials_requested, created_at=utcnow(), user=user, host=host,
                tuner_version=tuner_version, torch_version=torch_version[:128],
                triton_version=triton_version[:128], objectives=",".join(objectives), prefer=prefer)
            session.add(row)
            session.flush()
            return q.to_study(row, workload_key, platform_key)

    def last_study(self, workload_key: str, platform_key: str) -> StudyInfo | None:
        """The newest study of this workload on this platform; None if there is none."""
        statement = (q.studies().where(WorkloadRow.key == workload_key,
                                       PlatformRow.key == platform_key)
                     .order_by(None).order_by(StudyRow.id.desc()).limit(1))
        with self.session_scope() as session:
            found = session.execute(statement).first()
            return None if found is None else q.to_study(*found)

    def record_trial(self, study_id: int, record: TrialRecord) -> bool:
        """Insert one trial. Returns False, writing nothing, when the study already has a
        result (any status but cancelled) with that number or that candidate key, so a
        retried or duplicated result never adds a row.

        A cancelled trial is no result: the study's cancelled rows with the same number or
        candidate key are replaced by `record`, in the same transaction, so a resumed search
        measures a candidate whose trial an interrupt stopped.
        """
        with self.session_scope(write=True) as session:
            q.drop_cancelled(session, study_id, record)
            statement = (q.insert(session, TrialRow).values(**q.trial_values(study_id, record))
                         .on_conflict_do_nothing().returning(TrialRow.id))
            if session.execute(statement).first() is not None:
                return True
            session.rollback()          # a result holds that number or candidate: change nothing
            return False

    def trials(self, study_id: int) -> list[TrialRecord]:
        """The study's trials ordered by number; empty for an unknown study."""
        statement = select(TrialRow).where(TrialRow.study_id == study_id).order_by(TrialRow.number)
        with self.session_scope() as session:
            return [q.to_trial(row) for row in session.scalars(statement)]

    def trials_for_workload(self, workload_key: str,
                            platform_key: str | None = None) -> list[tuple[StudyInfo, TrialRecord]]:
        """Every trial of every study of the workload (on one platform, if given), ordered
        by study then number; empty when there are none."""
        statement = (q.studies().add_columns(TrialRow)
                     .join(TrialRow, TrialRow.study_id == StudyRow.id)
                     .where(WorkloadRow.key == workload_key).order_by(TrialRow.number))
        if platform_key is not None:
            statement = statement.where(PlatformRow.key == platform_key)
        with self.session_scope() as session:
            return [(q.to_study(study, wkey, pkey), q.to_trial(trial))
                    for study, wkey, pkey, trial in session.execute(statement)]

    def save_best(self, best: BestConfig, *, installed: tuple[str, str] | None = None) -> bool:
        """Keep the better config for (graph, platform), atomically, and record the attempt in
        history in the same transaction; returns whether `best` was stored.

        A missing row is always filled. When `best` and the stored row were measured under
        different (torch, triton) versions, the one matching `installed` (default: the
        versions in the platform's software) is kept whatever the numbers. Otherwise an
        existing row is replaced only when `best` has a higher ci_low (on a tie, a higher
        speedup), or when both are default-is-best and `best` is newer (a refresh); an eager
        verdict is not default-is-best and competes on its evidence like any config.
        Every distinct measurement gets one history row (`best_history`), kept or not; the
        same measurement offered again changes nothing. `created_at=None` means now.
        The platform must be stored first; `study_id` must name a study of this database
        or be None.
        """
        with self.session_scope(write=True) as session:
            platform = q.platform_of(session, best.platform_key)
            stored, _ = q.save_best(session, best, platform,
                                    installed=installed or q.versions_of(platform))
            return stored

    def best_history(self, graph_key: str, platform_key: str) -> list[HistoryEntry]:
        """Every measurement offered as this graph's best config on this platform, in the
        order this database received them; empty on a miss."""
        statement = (select(BestHistoryRow).join(PlatformRow)
                     .where(BestHistoryRow.graph_key == graph_key, PlatformRow.key == platform_key)
                     .order_by(BestHistoryRow.id))
        with self.session_scope() as session:
            return [q.to_history(row, platform_key) for row in session.scalars(statement)]

    def platforms(self) -> list[Platform]:
        """Every stored platform, oldest first."""
        with self.session_scope() as session:
            return [q.to_platform(row) for row in
                    session.scalars(select(PlatformRow).order_by(PlatformRow.id))]

    def workload_names(self) -> dict[str, str]:
        """Every stored workload: key -> name, oldest first."""
        statement = select(WorkloadRow.key, WorkloadRow.name).order_by(WorkloadRow.id)
        with self.session_scope() as session:
            return {key: name for key, name in session.execute(statement)}

    def snapshot(self, *, workload_keys: list[str] | None = None,
                 platform_keys: list[str] | None = None) -> Snapshot:
        """The best configs (of graphs of these workloads, on these platforms; None: all), with
        their platforms and the workloads (graphs included) that contain their graphs, and the
        selection's failure rules and kernel configs (`failure_rows.with_rules`, `kernel_rows.with_kernels`).
        What `tuner db export` writes and `tuner db merge` reads. Empty when nothing matches."""
        with self.session_scope() as session:
            return snapshots.read(session, workload_keys=workload_keys, platform_keys=platform_keys)

    def apply_snapshot(self, snapshot: Snapshot, *, source: str, origin: str) -> ApplyReport:
        """Write a validated snapshot (an import or a merge) in ONE transaction: all or nothing.

        Platforms and workloads are added when new (stored ones never change). Each best
        config goes through the rules of `save_best`, with its platform's own versions as
        the installed ones, and into history with `source` ("import" or "merge") and
        `origin`; `study_id` is dropped (studies are local). Applying the same snapshot
        again changes nothing. Failure rules are unioned, keeping the larger evidence
        (`failure_rows.apply_rules`); kernel configs are kept when new or faster (`kernel_rows.save_in`).
        Validation is the caller's (tuner.storage.exchange)."""
        if source not in ("import", "merge"):
            raise ValueError(f"source must be 'import' or 'merge', got {source!r}")
        with self.session_scope(write=True) as session:
            return snapshots.apply(session, snapshot, source=source, origin=origin)

    def check_writable(self) -> None:
        """Raise ReadOnlyDatabase, naming the fix, unless this store can write what a search
        writes. Call it before starting work that must write (`tuner search`, import, merge).

        Read-only stores are refused. PostgreSQL: the role needs INSERT on every tuner table
        and UPDATE on best_configs (with their id sequences), in a writable transaction on a
        primary server. SQLite: the file and its folder must be writable (WAL files).
        Reads nothing else and writes nothing.
        """
        if self._readonly:
            raise write_access.opened_readonly(self._url)
        if self._url.get_backend_name() == "sqlite":
            write_access.check_sqlite_files(self._url)
            return
        with self.session_scope() as session:
            write_access.check_privileges(session.connection(), self._url)

    def best_config(self, graph_key: str, platform_key: str) -> BestConfig | None:
        """The kept config for this graph on exactly this platform; None on a miss."""
        statement = (select(BestConfigRow).join(PlatformRow)
                     .where(BestConfigRow.graph_key == graph_key, PlatformRow.key == platform_key))
        with self.session_scope() as session:
            row = session.scalars(statement).first()
            return None if row is None else q.to_best(row, platform_key)

    def best_configs_for_graph(self, graph_key: str) -> list[tuple[BestConfig, Platform]]:
        """The kept configs for this graph on every platform, with each platform, for the
        "same hardware, other software" lookup tier. Empty on a miss."""
        statement = (select(BestConfigRow, PlatformRow).join(PlatformRow)
                     .where(BestConfigRow.graph_key == graph_key).order_by(BestConfigRow.id))
        with self.session_scope() as session:
            return [(q.to_best(best, platform.key), q.to_platform(platform))
                    for best, platform in session.execute(statement)]

    def bucket_configs(self, platform_key: str) -> list[tuple[str, GraphFingerprint, BestConfig]]:
        """(workload name, graph, its kept config on exactly this platform) for every graph of a
        shape-bucket workload (`tuner search --shapes` names them `stem[batch=8]`) that has one:
        the candidates of the lookup's nearest-bucket tier. Empty when no bucket was tuned here."""
        with self.session_scope() as session:
            return q.bucket_configs(session, platform_key)

    def workload_best(self, workload_key: str, platform_key: str) -> list[BestConfig]:
        """One kept config per distinct graph of the workload that has one on this platform,
        in graph order. Empty when the workload is unknown or untuned."""
        statement = (select(BestConfigRow)
                     .join(GraphRow, GraphRow.key == BestConfigRow.graph_key)
                     .join(WorkloadRow, GraphRow.workload_id == WorkloadRow.id)
                     .join(PlatformRow, BestConfigRow.platform_id == PlatformRow.id)
                     .where(WorkloadRow.key == workload_key, PlatformRow.key == platform_key)
                     .order_by(GraphRow.index))
        with self.session_scope() as session:
            first: dict[str, BestConfigRow] = {}
            for row in session.scalars(statement):
                first.setdefault(row.graph_key, row)   # a graph may recur within a workload
            return [q.to_best(row, platform_key) for row in first.values()]

    def workload(self, workload_key: str) -> tuple[str, ...] | None:
        """The workload's graph keys in Dynamo order; None when the workload is not stored."""
        statement = (select(WorkloadRow.id, GraphRow.key)
                     .outerjoin(GraphRow, GraphRow.workload_id == WorkloadRow.id)
                     .where(WorkloadRow.key == workload_key).order_by(GraphRow.index))
        with self.session_scope() as session:
            rows = session.execute(statement).all()
        if not rows:
            return None
        return tuple(key for _, key in rows if key is not None)

    def platform_row(self, platform_key: str) -> Platform | None:
        """The stored platform with this key; None when it is not stored."""
        statement = select(PlatformRow).where(PlatformRow.key == platform_key)
        with self.session_scope() as session:
            row = session.scalars(statement).first()
            return None if row is None else q.to_platform(row)
