"""`tuner report` on a small recorded study of tests/models/tiny_mlp.py, in a real SQLite file.

The study is stored the way a search stores it (`Store.record_trial`, `Store.save_best`): the
defaults, a mode preset, freezing, ok trials, failures of three kinds sharing error lines, and a
pruned trial. One real run with the operator profile (it compiles the model twice here); one
from a read-only (chmod 444) copy with --no-profile (when the tests run as root, whom file modes
do not stop, in a subprocess without the capabilities that override them). The page is opened in real headless Chromium (Debian's
chromium and chromium-driver, which scripts/test.sh installs), with no network: no console
error, every image loaded. Its screenshot is kept in test-artifacts/report.png.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from helpers import MODELS, cli_env, run_main
from helpers.browser import ARTIFACTS, browse
from tuner.report.data import failure_rows, history_points, running_best, seed_label
from tuner.storage import BestConfig, Store, TrialRecord, upgrade
from tuner.trial import Candidate, Measurement, Status

TINY = str(MODELS / "tiny_mlp.py")
# what lets root write a file whatever its mode: dropped for the read-only run when the tests run as root
DROP = "-dac_override,-dac_read_search,-fowner"
AT = datetime(2026, 5, 14, 9, 30, tzinfo=timezone.utc)
COMPILE_LINE = "InductorError: CppCompileError: C++ compile error"
BEST = {"freezing": True, "max_fusion_size": 8}
# (params, status, speedup over the defaults or error line); latencies are 0.1 ms / speedup
TRIALS = [({}, Status.OK, 1.0), ({"mode": "max-autotune-no-cudagraphs"}, Status.OK, 1.04),
          ({"freezing": True}, Status.OK, 1.17), ({"epilogue_fusion": False}, Status.OK, 0.97),
          ({"max_fusion_size": 8}, Status.OK, 1.01), ({"cpp_wrapper": True}, Status.COMPILE_ERROR, COMPILE_LINE),
          ({"cpp_wrapper": True, "epilogue_fusion": False}, Status.COMPILE_ERROR, COMPILE_LINE),
          ({"aggressive_fusion": True}, Status.OK, 0.99), (BEST, Status.OK, 1.21),
          ({"max_autotune": True}, Status.TIMEOUT, "timeout: the trial ran past its 120 s deadline"),
          ({"split_reductions": False}, Status.WRONG_RESULT, "output differs from eager: max abs diff 0.5"),
          ({"pattern_matcher": False}, Status.PRUNED, 0.8), ({"freezing": True, "aggressive_fusion": True},
                                                              Status.OK, 1.19),
          ({"max_fusion_size": 32, "epilogue_fusion": False}, Status.OK, 0.98),
          ({"cpp_wrapper": True, "max_fusion_size": 8}, Status.COMPILE_ERROR, "InductorError: linker failed")]


def _measurement(status: Status, outcome: float | str) -> Measurement:
    if isinstance(outcome, str):
        return Measurement.failed(status, f"{outcome}\nTraceback (most recent call last):\n  ...")
    return Measurement(status, latency_ms=0.1 / outcome, spread_ms=0.004, compile_s=2.0, reps=10, threads=2,
                       baseline_ms=0.1, speedup=outcome, speedup_low=outcome - 0.02, speedup_high=outcome + 0.02)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file holding one study of tiny_mlp here (TRIALS) and its kept config (BEST)."""
    from tuner.search import prepare_target

    target = prepare_target(TINY)
    path = tmp_path_factory.mktemp("recorded") / "tuned.db"
    upgrade(f"sqlite:///{path}")
    w, p = target.workload, target.platform
    with Store.open(f"sqlite:///{path}") as store:
        store.ensure_platform(p)
        store.ensure_workload(w)
        study = store.create_study(workload_key=w.key, platform_key=p.key, space_hash=target.space.hash,
                                   sampler="tpe", seed=0, trials_requested=len(TRIALS), user="alice",
                                   host="box", tuner_version="0.2.0")
        for number, (params, status, outcome) in enumerate(TRIALS):
            assert target.space.candidate(params).as_dict() == params     # real knobs of the CPU space
            start = AT + timedelta(seconds=10 * number)
            assert store.record_trial(study.id, TrialRecord(number, Candidate.from_dict(params).key, params,
                                                            _measurement(status, outcome), start,
                                                            start + timedelta(seconds=8)))
        assert store.save_best(BestConfig(
            graph_key=w.graphs[0].key, platform_key=p.key, params=BEST, is_default=False, speedup=1.2,
            ci_low=1.15, ci_high=1.26, rounds=10, latency_ms=0.083, baseline_ms=0.1, workload_key=w.key,
            study_id=study.id, user="alice", host="box", tuner_version="0.2.0",
            torch_version=dict(p.software)["torch"], created_at=AT, unfrozen_params={}, search_speedup=1.21))
    return path


def test_the_report_renders_in_chromium_with_the_profile(recorded: Path, tmp_path: Path,
                                                         capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    capfd.readouterr()
    done = run_main("report", TINY, "--out", str(out), "--db", f"sqlite:///{recorded}")
    assert done.returncode == 0, done.stderr
    native = capfd.readouterr()     # what reached the process's own file descriptors
    assert "USDT:" not in native.err + done.stderr, "the profiler's own trace lines reached the output"
    assert done.stdout.splitlines()[0] == f"wrote {out / 'index.html'}"
    assert sorted(p.name for p in out.iterdir()) == ["history.png", "importances.png", "index.html", "latencies.png"]
    page = (out / "index.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert page.count('src="data:image/png;base64,') == 3
    for shown in ("<code>freezing</code>", "1.20x</b> [1.15, 1.26] over 10 paired rounds", "compile_error",
                  f"<code>{COMPILE_LINE}</code> &times;2", "not counted as failures: 1 pruned",
                  "mode=max-autotune-no-cudagraphs", "exact hit", "kept config ms"):
        assert shown in page, shown
    browse(out / "index.html", ARTIFACTS / "report.png")


def test_the_report_renders_from_a_database_it_cannot_write(recorded: Path, tmp_path: Path) -> None:
    """A read-only copy, opened by a process that cannot write it: the page still comes."""
    db, out = tmp_path / "readonly.db", tmp_path / "out"
    shutil.copy(recorded, db)
    db.chmod(0o444)
    before = hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns
    done = _report_as_unprivileged(db, out)
    assert done.returncode == 0, done.stderr
    assert (hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns) == before
    page = (out / "index.html").read_text()
    assert "skipped (--no-profile)" in page and page.count("data:image/png;base64,") == 3


def _report_as_unprivileged(db: Path, out: Path) -> subprocess.CompletedProcess:
    """`tuner report --no-profile` reading `db`: in this process, or when we are root (whom file
    modes do not stop) in a subprocess without the capabilities that override them."""
    args = ["report", TINY, "--out", str(out), "--db", f"sqlite:///{db}", "--no-profile"]
    if os.geteuid() != 0:
        ran = run_main(*args)
        return subprocess.CompletedProcess(args, ran.returncode, ran.stdout, ran.stderr)
    return subprocess.run(["setpriv", f"--bounding-set={DROP}", sys.executable, "-m", "tuner", *args],
                          cwd=out.parent, env=cli_env(), capture_output=True, text=True, timeout=300, check=False)


def test_a_model_with_nothing_stored_names_the_search_to_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    done = run_main("report", TINY, "--out", str(tmp_path / "out"), "--db", url)
    assert done.returncode == 1 and not (tmp_path / "out").exists()
    assert done.stderr.startswith(f"error: no stored trials or config for {TINY} on ")
    assert done.stderr.rstrip().endswith(f"; run: tuner search {TINY}")


def test_an_out_path_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    taken = tmp_path / "report"
    taken.write_text("mine")
    done = run_main("report", TINY, "--out", str(taken), "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert done.returncode == 2
    assert done.stderr == f"error: --out {taken} is a file; give a folder for index.html and the figures\n"
    assert taken.read_text() == "mine"


def test_history_marks_the_seeds_and_leaves_out_failures() -> None:
    records = tuple(TrialRecord(n, f"k{n}", params, _measurement(status, outcome))
                    for n, (params, status, outcome) in enumerate(TRIALS))
    points = history_points(records)
    assert [p.number for p in points] == [0, 1, 2, 3, 4, 7, 8, 11, 12, 13]
    assert [(p.number, p.seed) for p in points if p.seed] == [(0, "defaults"), (1, "mode=max-autotune-no-cudagraphs")]
    assert running_best(points)[-1] == (13, 1.21) and (11, 0.8) not in running_best(points)
    assert seed_label({"mode": "default", "freezing": True}) is None
    rows = failure_rows(records)
    assert [(r.status, r.count) for r in rows] == [("compile_error", 3), ("timeout", 1), ("wrong_result", 1)]
    assert rows[0].errors == ((COMPILE_LINE, 2), ("InductorError: linker failed", 1))
    assert failure_rows(tuple(replace(r, measurement=_measurement(Status.OK, 1.0)) for r in records)) == []


