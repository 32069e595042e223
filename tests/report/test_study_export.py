"""`tuner.report.optuna_study`: stored trial records become an Optuna study that Optuna's
own analysis (parameter importances) and storages (a journal file) accept."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from tuner.report import optuna_study
from tuner.report.study_export import OBJECTIVE_NAME, knob_distributions
from tuner.storage import TrialRecord
from tuner.trial import Measurement, Status

AT = datetime(2026, 5, 14, 9, 30, tzinfo=timezone.utc)


def paired(speedup: float, latency_ms: float = 1.0) -> Measurement:
    return Measurement(Status.OK, latency_ms, 0.01, 2.0, 300, 12, baseline_ms=latency_ms * speedup,
                       speedup=speedup, speedup_low=speedup - 0.05, speedup_high=speedup + 0.05)


def record(number: int, params: dict, m: Measurement) -> TrialRecord:
    start = AT + timedelta(seconds=10 * number)
    return TrialRecord(number, f"k{number}", params, m, started_at=start, finished_at=start + timedelta(seconds=4))


RECORDS = [
    record(0, {}, paired(1.0)),
    record(1, {"max_autotune": True}, paired(1.25)),
    record(2, {"max_fusion_size": 128}, paired(0.8)),
    record(3, {"max_autotune": True, "max_fusion_size": 32}, paired(1.5)),
    record(4, {"cpp.gemm_thread_factors": "2,1,1"}, paired(1.1)),   # admitted by the knob's pattern only
    record(5, {"epilogue_fusion": False}, Measurement(Status.PRUNED, 1.4, reps=6, speedup=0.7)),
    record(6, {"mode": "max-autotune"}, Measurement.failed(Status.COMPILE_ERROR, "InductorError: boom\ntrace")),
    record(7, {"freezing": True}, Measurement.failed(Status.CRASHED, "killed by signal 9")),
    record(8, {"my_knob": 3}, Measurement(Status.CANCELLED)),   # a knob this catalogue does not know
]


def test_every_record_becomes_one_trial_with_its_state_value_and_attrs() -> None:
    study = optuna_study(RECORDS, name="tiny")
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 5 + [TrialState.PRUNED] + [TrialState.FAIL] * 3
    assert [t.value for t in trials[:5]] == pytest.approx([1.0, 0.8, 1.25, 1 / 1.5, 1 / 1.1])
    assert study.direction is optuna.study.StudyDirection.MINIMIZE
    assert study.metric_names == [OBJECTIVE_NAME]
    assert study.best_trial.user_attrs["number"] == 3
    assert trials[1].user_attrs == {"status": "ok", "latency_ms": 1.0, "speedup": "1.25x [1.20, 1.30]",
                                    "error": "", "number": 1, "candidate_key": "k1"}
    assert trials[5].intermediate_values == {6: pytest.approx(1 / 0.7)}
    assert trials[6].user_attrs["status"] == "compile_error"
    assert trials[6].user_attrs["error"] == "InductorError: boom"
    assert trials[8].user_attrs["status"] == "cancelled" and trials[8].user_attrs["speedup"] == "-"
    assert trials[3].datetime_start == AT + timedelta(seconds=30)
    assert trials[3].duration == timedelta(seconds=4)


def test_params_fill_unset_catalogue_knobs_with_their_defaults() -> None:
    trials = optuna_study(RECORDS, name="tiny").get_trials(deepcopy=False)
    assert trials[0].params == {"cpp.gemm_thread_factors": None, "epilogue_fusion": True, "freezing": False,
                                "max_autotune": False, "max_fusion_size": 64, "mode": "default"}
    assert trials[3].params["max_autotune"] is True and trials[3].params["max_fusion_size"] == 32
    assert "my_knob" not in trials[0].params and trials[8].params["my_knob"] == 3


def test_distributions_come_from_the_catalogue_or_from_the_values_seen() -> None:
    found = knob_distributions(RECORDS)
    assert list(found) == sorted(found)
    assert found["max_autotune"] == CategoricalDistribution((False, True))
    assert found["max_fusion_size"] == IntDistribution(4, 512, log=True)        # the catalogue's range
    assert found["mode"].choices[0] == "default" and "max-autotune" in found["mode"].choices
    # "2,1,1" is outside the catalogue's choices (it passed the knob's pattern): the values seen instead.
    assert found["cpp.gemm_thread_factors"] == CategoricalDistribution(("2,1,1", None))
    assert found["my_knob"] == IntDistribution(3, 3)
    floats = [record(0, {"unknown.ratio": 0.5}, paired(1.0)), record(1, {"unknown.ratio": 2}, paired(1.0))]
    assert knob_distributions(floats)["unknown.ratio"] == FloatDistribution(0.5, 2.0)


def test_parameter_importances_run_on_the_study() -> None:
    # Optuna's default evaluator (no scikit-learn needed, unlike fANOVA) on the complete trials.
    importances = optuna.importance.get_param_importances(optuna_study(RECORDS, name="tiny"))
    # Every knob the complete trials hold; the two they vary most come first.
    assert set(importances) == set(knob_distributions(RECORDS)) - {"my_knob"}
    assert set(list(importances)[:2]) == {"max_autotune", "max_fusion_size"}
    assert sum(importances.values()) == pytest.approx(1.0)


def test_a_journal_file_holds_the_study_and_refuses_a_second_of_the_same_name(tmp_path: Path) -> None:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = str(tmp_path / "studies.log")
    optuna_study(RECORDS, name="tiny", storage=JournalStorage(JournalFileBackend(path)))
    loaded = optuna.load_study(study_name="tiny", storage=JournalStorage(JournalFileBackend(path)))
    assert len(loaded.trials) == len(RECORDS)
    assert loaded.trials[2].params["max_fusion_size"] == 128
    with pytest.raises(optuna.exceptions.DuplicatedStudyError):
        optuna_study(RECORDS[:1], name="tiny", storage=JournalStorage(JournalFileBackend(path)))


def test_no_records_make_an_empty_study() -> None:
    assert optuna_study([], name="empty").trials == []
