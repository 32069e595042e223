"""SQLite writers wait long enough (issue 22, item 10): a search's write outlasts another
writer that holds the lock past the old 5 s busy timeout, and a failed export leaves no
temporary file behind."""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from helpers.exchange_data import BY, source  # noqa: F401  (the fixture)
from tuner.errors import ExchangeError
from tuner.storage import Store, export_file, upgrade
from helpers.records import make_study, trial

HOLD_S = 7.0      # longer than the 5 s a writer used to wait


def test_a_search_records_its_trial_past_a_long_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "tuner.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    with Store.open(url) as store:          # opened as the search opens it (tuner/search/pipeline.py)
        study = make_study(store)
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")   # an import or merge applying its file
        release = threading.Timer(HOLD_S, lambda: holder.execute("COMMIT"))
        release.start()
        try:
            started = time.monotonic()
            assert store.record_trial(study.id, trial(0, "c0", max_autotune=True))
            assert time.monotonic() - started >= HOLD_S - 0.5
        finally:
            release.join()
            holder.close()
        assert [t.candidate_key for t in store.trials(study.id)] == ["c0"]


def test_a_failed_export_removes_its_temporary_file(source: Store, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    target = out / "team.json"
    target.mkdir(parents=True)             # the rename onto a folder fails after the write
    with pytest.raises(ExchangeError, match="cannot write"):
        export_file(source, target, **BY)
    assert sorted(p.name for p in out.iterdir()) == ["team.json"]
