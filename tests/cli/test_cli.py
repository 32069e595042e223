"""The CLI in this process through `tuner.cli.main`: usage errors, bad model files, `--debug`,
best/trials on a prepared database, the db commands. Real SQLite files; no search runs here
(tests/system/test_search.py runs real searches as subprocesses)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from fixtures.sharing_data import best, platform, seed, workload
from helpers import MODELS, cli_env, run_main
from tuner.cli import build_parser
from tuner.cli.common import format_table
from tuner.storage import BestConfig, Store, TrialRecord, upgrade
from tuner.text import key_values
from tuner.trial import Measurement, Status

TINY = str(MODELS / "tiny_mlp.py")


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


# -- the command line itself --------------------------------------------------------------

@pytest.mark.parametrize("argv", [["--debug", "db", "ls"], ["db", "ls", "--debug"], ["db", "--debug", "ls"],
                                  ["search", "m.py", "--debug"], ["--debug", "explain", "m.py"]])
def test_debug_goes_before_or_after_the_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).debug is True
    assert build_parser().parse_args([a for a in argv if a != "--debug"]).debug is False


def test_debug_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    plain = run_main("db", "ls", "--db", url)
    assert plain.returncode == 1 and "tuner db upgrade" in one_error_line(plain.stderr)
    debug = run_main("db", "ls", "--db", url, "--debug")
    assert debug.returncode == 1 and debug.stderr.startswith("Traceback")
    assert debug.stderr.strip().splitlines()[-1] == plain.stderr.strip()


def test_python_m_tuner_and_the_console_script_run(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("tuner")
    for argv in ([sys.executable, "-m", "tuner", "db", "--help"], [str(script), "db", "--help"]):
        done = subprocess.run(argv, cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "upgrade" in done.stdout and "merge" in done.stdout, done.stderr


def test_the_command_line_loads_no_heavy_package_before_a_command_runs(tmp_path: Path) -> None:
    code = ("import sys, tuner.cli; tuner.cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'sqlalchemy', 'optuna', 'ray', 'matplotlib', 'rich') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# -- tuner search: what stops it before any trial -----------------------------------------

@pytest.mark.parametrize(("flags", "message"), [
    (["--trials", "0"], "--trials must be at least 1, got 0"),
    (["--sampler", "nuts"], "unknown sampler 'nuts'; choose one of: tpe, cmaes, gp, qmc, random, grid"),
    (["--threads", "-1"], "--threads must be at least 1, got -1"),
    (["--rounds", "4"], "--rounds must be at least 12 (half choose, half report, and a 95% interval needs 6 rounds "
                        "per half), got 4"),
    (["--executor", "local", "--platform", "all"], "--address and --platform need Ray; drop --executor local"),
    (["--executor", "local", "--address", "auto"], "--address and --platform need Ray; drop --executor local"),
    (["--budget", "20x"],
     "--budget '20x' is not a duration above zero; write it like 90s, 20m, 1.5h or 1h30m"),
])
def test_search_usage_errors_come_before_any_work(tmp_path: Path, flags: list[str], message: str) -> None:
    db = tmp_path / "never.db"
    # The model file does not exist: had it been loaded first, the error would say so.
    done = run_main("search", str(tmp_path / "missing.py"), *flags, "--db", f"sqlite:///{db}")
    assert done.returncode == 2 and one_error_line(done.stderr) == f"error: {message}"
    assert not db.exists()


BAD_FILES = {
    "missing.py": "not found",
    "syntax_error.py": "syntax_error.py:2",
    "no_get_inputs.py": "get_inputs",
    "returns_int.py": "nn.Module",
    "fails_in_eager.py": "eager",
}
BAD_SOURCES = {
    "syntax_error.py": "import torch\ndef get_model(:\n    pass\n",
    "no_get_inputs.py": "import torch\ndef get_model():\n    return torch.nn.Linear(2, 2)\n",
    "returns_int.py": "import torch\ndef get_model():\n    return 3\ndef get_inputs():\n    return (torch.randn(2, 2),)\n",
    "fails_in_eager.py": ("import torch\ndef get_model():\n    return torch.nn.Linear(2, 2)\n"
                          "def get_inputs():\n    return (torch.randn(2, 3),)\n"),
}


@pytest.mark.parametrize("name,needle", sorted(BAD_FILES.items()))
def test_bad_model_files_fail_in_one_line_and_write_nothing(tmp_path: Path, name: str, needle: str) -> None:
    path = tmp_path / name
    if name != "missing.py":
        path.write_text(BAD_SOURCES[name])
    db = tmp_path / "never.db"
    done = run_main("search", str(path), "--trials", "2", "--executor", "local", env=cli_env(TUNER_DB=f"sqlite:///{db}"))
    assert done.returncode == 1
    assert needle in one_error_line(done.stderr)
    assert not db.exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--workers", "0"], "--workers must be at least 1, got 0"),
    (["--executor", "nope"], "unknown executor 'nope'; choose one of: local, ray"),
])
def test_executor_errors_stop_the_search_before_any_trial(tmp_path: Path, flags: list[str], message: str) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    done = run_main("search", TINY, *flags, "--db", url)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == f"error: {message}", done.stderr
    with Store.open(url, readonly=True) as store:
        assert store.platforms() == []


def test_resume_without_an_earlier_search_says_so_after_naming_what_it_tunes(tmp_path: Path) -> None:
    shutil.copy(TINY, tmp_path / "model.py")
    done = run_main("search", str(tmp_path / "model.py"), "--resume", "--executor", "local",
                    "--db", f"sqlite:///{tmp_path / 't.db'}")
    assert done.returncode == 2
    tuning, error = done.stderr.strip().splitlines()
    assert tuning.startswith("tuning model (1 graph(s), workload ") and f"database sqlite:///{tmp_path}" in tuning
    assert error == (f"error: no earlier search of {(tmp_path / 'model.py').resolve()} on this platform "
                     f"to resume; run without --resume")


# -- tuner best / trials on a prepared database -------------------------------------------

@pytest.fixture(scope="module")
def tiny_target():
    from tuner.search import prepare_target

    return prepare_target(TINY)


@pytest.fixture
def tuned_db(tmp_path: Path, tiny_target) -> str:
    """tiny_mlp as if searched here: one study of two trials and a stored best config."""
    url = f"sqlite:///{tmp_path / 'tuned.db'}"
    upgrade(url)
    w, p = tiny_target.workload, tiny_target.platform
    with Store.open(url) as store:
        store.ensure_platform(p)
        store.ensure_workload(w)
        study = store.create_study(workload_key=w.key, platform_key=p.key, space_hash="h", sampler="tpe", seed=3,
                                   trials_requested=2, user="alice", host="box", tuner_version="0.1.0")
        at = datetime(2026, 5, 10, 12, 0, tzinfo=timezone.utc)
        store.record_trial(study.id, TrialRecord(0, "k0", {}, Measurement(Status.OK, 1.2, 0.01, 2.0, 300, 5),
                                                 finished_at=at))
        store.record_trial(study.id, TrialRecord(1, "k1", {"max_autotune": True, "epilogue_fusion": False},
                                                 Measurement.failed(Status.COMPILE_ERROR, "boom\ntrace"),
                                                 finished_at=at))
        store.save_best(BestConfig(graph_key=w.graphs[0].key, platform_key=p.key, params={"max_autotune": True},
                                   is_default=False, speedup=1.2, ci_low=1.1, ci_high=1.25, rounds=15,
                                   latency_ms=1.0, baseline_ms=1.2, workload_key=w.key, study_id=study.id,
                                   user="alice", host="box", tuner_version="0.1.0",
                                   torch_version=dict(p.software)["torch"], created_at=at))
    return url


def test_best_prints_the_config_its_evidence_and_provenance(tuned_db: str) -> None:
    done = run_main("best", TINY, "--db", tuned_db)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["config: max_autotune=True",
                         "confirmed speedup over default compile: 1.20x [1.10, 1.25] over 15 paired rounds",
                         "latency: 1.000 ms tuned, 1.200 ms default"]
    assert lines[3].startswith("provenance: alice@box, 2026-05-10 12:00 UTC, tuner 0.1.0, torch ")


def test_trials_lists_each_study_as_a_table(tuned_db: str) -> None:
    done = run_main("trials", TINY, "--db", tuned_db)
    assert done.returncode == 0, done.stderr
    header, columns, ok, failed = done.stdout.splitlines()
    assert header.startswith("study 1 (") and header.endswith(", sampler tpe, seed 3)")
    assert columns.split()[:2] == ["#", "status"] and columns.endswith("peak MB  params / error")
    assert ok.split() == ["0", "ok", "1.200", "0.010", "2.0", "300", "defaults"]
    assert failed.split()[:2] == ["1", "compile_error"]
    assert failed.endswith("epilogue_fusion=False, max_autotune=True | boom")
    assert columns.index("params") == ok.index("defaults") == failed.index("epilogue_fusion")


@pytest.mark.parametrize("command", ["best", "trials"])
def test_nothing_stored_prints_what_to_run(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    done = run_main(command, TINY, "--db", url)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().endswith(f"; run: tuner search {TINY}")


def test_explain_on_a_database_without_tuner_tables_names_the_fix(tmp_path: Path) -> None:
    done = run_main("explain", TINY, "--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert done.returncode == 1 and "tuner db upgrade" in one_error_line(done.stderr)


# -- tuner db -----------------------------------------------------------------------------

def test_db_upgrade_creates_then_keeps_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    first, again = run_main("db", "upgrade", "--db", url), run_main("db", "upgrade", "--db", url)
    assert first.returncode == again.returncode == 0
    assert first.stdout.startswith(f"{url}: schema empty -> ")
    head = first.stdout.split(" -> ")[1].strip()
    assert again.stdout.strip() == f"{url}: schema {head} -> {head}"


def test_db_ls_export_import_merge(tmp_path: Path) -> None:
    team, mine, other = (f"sqlite:///{tmp_path / name}.db" for name in ("team", "mine", "other"))
    for url in (team, mine, other):
        upgrade(url)
    w, p = workload("mlp", "relu", "sigmoid"), platform("AMD EPYC 9454")
    with Store.open(team) as store:
        seed(store, w, p, best(w, p, ci_low=1.15), best(w, p, graph=1, ci_low=1.2, rounds=9))

    listed = run_main("db", "ls", "--db", team)
    assert listed.returncode == 0, listed.stderr
    header, row, blank, legend = listed.stdout.splitlines()
    assert header.split() == ["WORKLOAD", "PLATFORM", "GRAPHS", "SPEEDUP", "INTERVAL", "ROUNDS", "BY", "WHEN",
                              "TORCH", "/", "TRITON", "RUNTIME", "FLAGS"]
    assert row.startswith(f"mlp {w.key[:8]}") and row.endswith("thin")        # the 9-round graph
    assert header.index("GRAPHS") == row.index(" 2 ") + 1 and blank == ""
    assert legend.startswith("thin: fewer than 10 rounds")

    exchange = tmp_path / "x.json"
    exported = run_main("db", "export", "--out", str(exchange), "--workload", "mlp", "--db", team)
    assert exported.stdout.startswith(f"exported 2 best configs (1 workload, 1 platform) from {team} to {exchange}")
    imported = run_main("db", "import", str(exchange), "--db", mine)
    assert imported.stdout.strip() == (f"imported {exchange} into {mine}: 2 records: 2 stored as best, 0 kept the "
                                       f"stored config (better or current evidence), 0 already present; "
                                       f"added 1 platform, 1 workload")
    merged = run_main("db", "merge", team, "--db", other)
    assert merged.returncode == 0 and merged.stdout.startswith(f"merged {team} into {other}: 2 records: 2 stored")
    itself = run_main("db", "merge", team, "--db", team)
    assert itself.returncode == 2 and "name a different SOURCE_URL" in one_error_line(itself.stderr)
    empty = run_main("db", "ls", "--platform", "nope", "--db", team)
    assert empty.returncode == 2 and "no platform 'nope'" in one_error_line(empty.stderr)


# -- shared text --------------------------------------------------------------------------

def test_one_table_layout() -> None:
    table = format_table([("A", "BB", "C"), ("long", "x", "last column"), ("", "", "")], rule=True)
    assert table.split("\n") == ["A     BB  C", "----  --  -----------", "long  x   last column", ""]


def test_key_values_keeps_the_order_given() -> None:
    assert key_values([("b", 1), ("a", True)]) == "b=1, a=True"
    assert key_values(sorted({"b": 1, "a": True}.items())) == "a=True, b=1"
    assert key_values([]) == ""


@pytest.mark.slow
def test_a_default_compile_that_fails_where_eager_works_is_named_in_one_line(tmp_path: Path) -> None:
    """Every trial is paired with the default compile: when it fails and eager works, the search
    ends with one line naming what fails and the error, not only "no trial ran correctly"."""
    done = run_main("search", str(MODELS / "fails_compiled.py"), "--trials", "1", "--executor", "local",
                    "--db", f"sqlite:///{tmp_path / 't.db'}")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("the model works in eager but fails under Inductor's default compile ("), last
    assert "(wrong_result)" in last and "every trial is paired with the default compile" in last


def test_the_default_failure_line_names_get_loss_in_train_mode() -> None:
    from datetime import datetime, timezone

    from tuner.cli.search import default_failure
    from tuner.storage import TrialRecord
    from tuner.trial import Measurement, Status

    now = datetime.now(timezone.utc)
    failed = Measurement.failed(Status.RUNTIME_ERROR, "AttributeError: 'X' object has no attribute 'y'\nTraceback", "w")
    trials = [TrialRecord(number=0, candidate_key="d", params={}, measurement=failed, started_at=now, finished_at=now)]
    line = default_failure(trials, train=True)
    assert line.startswith("get_loss works in eager but fails on the compiled model (runtime_error): "
                           "AttributeError: 'X' object has no attribute 'y';"), line
    ok = Measurement(status=Status.OK, latency_ms=1.0)
    assert default_failure([TrialRecord(number=0, candidate_key="d", params={}, measurement=ok, started_at=now,
                                        finished_at=now)], train=False) is None
