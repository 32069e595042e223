"""`tuner dashboard`: stored trials become an Optuna journal that Optuna loads back, and a real
optuna-dashboard serves it on loopback, following new trials, until it is stopped."""
from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import optuna
import pytest

from helpers import MODELS, cli_env, run_main
from tuner.storage import Store, TrialRecord, upgrade
from tuner.trial import Measurement, Status

TINY = str(MODELS / "tiny_mlp.py")
AT = datetime(2026, 5, 14, 9, 30, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> str:
    """A database holding two studies of tiny_mlp on this platform: 3 trials, then 2."""
    from tuner.search import prepare_target

    target = prepare_target(TINY)
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'tuned.db'}"
    upgrade(url)
    paired = Measurement(Status.OK, 0.9, 0.01, 2.0, 300, 20, baseline_ms=1.0, speedup=1.125,
                         speedup_low=1.0625, speedup_high=1.1875)
    trials = [[TrialRecord(0, "k0", {}, Measurement(Status.OK, 1.0, speedup=1.0), finished_at=AT),
               TrialRecord(1, "k1", {"max_autotune": True}, paired, finished_at=AT),
               TrialRecord(2, "k2", {"freezing": True}, Measurement.failed(Status.CRASHED, "killed"),
                           finished_at=AT)],
              [TrialRecord(0, "k0", {}, Measurement(Status.OK, 1.0, speedup=1.0), finished_at=AT),
               TrialRecord(1, "k3", {"max_fusion_size": 128}, paired, finished_at=AT)]]
    with Store.open(url) as store:
        store.ensure_platform(target.platform)
        store.ensure_workload(target.workload)
        for records in trials:
            study = store.create_study(workload_key=target.workload.key, platform_key=target.platform.key,
                                       space_hash="h", sampler="tpe", seed=3, trials_requested=3,
                                       user="alice", host="box", tuner_version="0.2.0")
            for record in records:
                store.record_trial(study.id, record)
    return url


def _journal(path: Path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def test_export_only_writes_a_journal_optuna_loads_back(stored: str, tmp_path: Path) -> None:
    journal = tmp_path / "tiny.log"
    journal.write_text("not a journal: replaced whole\n")
    done = run_main("dashboard", TINY, "--db", stored, "--journal", str(journal), "--export-only")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"wrote {journal}: 2 studies, 5 trials",
                                        f"serve it with: optuna-dashboard {journal}"]
    summaries = optuna.get_all_study_summaries(_journal(journal))
    assert sorted((s.study_name, s.n_trials) for s in summaries) == [("tiny_mlp study 1", 3),
                                                                     ("tiny_mlp study 2", 2)]
    first = optuna.load_study(study_name="tiny_mlp study 1", storage=_journal(journal))
    assert first.user_attrs["sampler"] == "tpe" and first.user_attrs["user"] == "alice"
    assert first.best_trial.params["max_autotune"] is True
    assert first.best_value == pytest.approx(1 / 1.125)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.log"]     # no partial or lock file left


def test_a_model_with_no_stored_trials_says_what_to_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    done = run_main("dashboard", TINY, "--db", url, "--journal", str(tmp_path / "j.log"), "--export-only")
    assert done.returncode == 1
    assert done.stderr.strip() == f"no stored trials for {TINY} on this platform; run: tuner search {TINY}"
    assert not (tmp_path / "j.log").exists()


def test_an_unwritable_journal_names_the_option(stored: str, tmp_path: Path) -> None:
    journal = tmp_path / "no-such-folder" / "j.log"
    done = run_main("dashboard", TINY, "--db", stored, "--journal", str(journal), "--export-only")
    assert done.returncode == 1
    assert done.stderr == (f"error: cannot write the journal {journal} (No such file or directory); "
                           f"choose a writable --journal path\n")


def test_without_optuna_dashboard_it_names_the_extra(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)     # what `import` sees when it is absent
    done = run_main("dashboard", TINY, "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert done.returncode == 2
    assert done.stderr == (f"error: optuna-dashboard is not installed; pip install '.[dashboard]' in the tuner "
                           f"checkout (or: pip install optuna-dashboard); or write the journal only: "
                           f"tuner dashboard {TINY} --export-only\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, deadline: float, server: subprocess.Popen) -> object:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.load(response)
        except (urllib.error.URLError, ConnectionError):
            if server.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_it_serves_the_studies_on_loopback_follows_new_trials_and_stops(stored: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"          # a copy: this test adds a trial
    shutil.copy(stored.removeprefix("sqlite:///"), tmp_path / "live.db")
    port = _free_port()
    journal = tmp_path / "served.log"
    server = subprocess.Popen([sys.executable, "-m", "tuner", "dashboard", TINY, "--db", url,
                               "--journal", str(journal), "--port", str(port)],
                              cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        answer = _get_json(f"http://127.0.0.1:{port}/api/studies", time.monotonic() + 120, server)
        assert sorted((s["study_name"], s["directions"]) for s in answer["study_summaries"]) == [
            ("tiny_mlp study 1", ["minimize"]), ("tiny_mlp study 2", ["minimize"])]
        second = next(s["study_id"] for s in answer["study_summaries"] if s["study_name"] == "tiny_mlp study 2")
        with pytest.raises(OSError):          # bound to loopback only
            socket.create_connection((_outside_address(), port), timeout=2).close()
        with Store.open(url) as store:        # a search still running records another trial
            store.record_trial(2, TrialRecord(2, "k4", {"max_fusion_size": 8}, Measurement(Status.OK, 0.8, speedup=1.2),
                                              finished_at=AT))
        deadline = time.monotonic() + 60
        while len(_get_json(f"http://127.0.0.1:{port}/api/studies/{second}", deadline, server)["trials"]) < 3:
            assert time.monotonic() < deadline, "the dashboard did not show the new trial within 60 s"
            time.sleep(1)
    finally:
        out, err = _stop(server)
    assert server.returncode == 0, err
    assert f"optuna-dashboard on http://127.0.0.1:{port}/, following the database (Ctrl-C stops it)" in out


def _stop(server: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM (what Ctrl-C does too), then SIGKILL if it has not exited within 30 s."""
    server.send_signal(signal.SIGTERM)
    try:
        return server.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        out, err = server.communicate()
        pytest.fail(f"the dashboard did not stop on SIGTERM:\n{err}")


def _outside_address() -> str:
    """An address of this machine other than loopback (the one its default route leaves from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))      # TEST-NET-1: sends nothing, only picks the route
            address = s.getsockname()[0]
        except OSError:
            address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this machine has no address but loopback")
    return address


def test_a_port_in_use_names_another(stored: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_main("dashboard", TINY, "--db", stored, "--journal", str(tmp_path / "j.log"), "--port", str(port))
    assert done.returncode == 1
    assert done.stderr == f"error: port {port} on 127.0.0.1 is in use; pick another: --port {port + 1}\n"
