"""Parameter importances of a stored study, by Optuna's PED-ANOVA importance evaluator.

The study is rebuilt from the stored trials (`tuner.report.optuna_study`). PED-ANOVA, not
Optuna's default fANOVA: fANOVA needs scikit-learn, which tuner does not depend on, and PED-ANOVA
is deterministic and made for conditional knobs (the children of max_autotune, freezing). It
measures how much each knob matters for reaching the best `target_quantile` of the trials.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.storage import TrialRecord

MIN_OK_TRIALS = 5       # fewer completed trials give importances that are mostly noise
# Optuna's docs advise at least 5 trials inside the target quantile: its default 0.1 from 50 ok
# trials on, a larger quantile (at most half the trials) below that.
TOP_TRIALS, QUANTILE, MAX_QUANTILE = 5, 0.1, 0.5
TOP_KNOBS = 15          # bars drawn; knobs of no importance are never drawn


@dataclass(frozen=True)
class Importances:
    """(knob, importance) pairs, most important first: the TOP_KNOBS largest of those above 0
    (importances sum to 1 over every knob evaluated). When there is nothing to show, `values` is
    empty and `note` says why in one line; otherwise `note` counts the knobs left out, if any."""

    values: tuple[tuple[str, float], ...] = ()
    note: str = ""


def parameter_importances(trials: tuple[TrialRecord, ...], *, name: str) -> Importances:
    """Optuna's importances over `trials` (ok ones are the study's completed trials), of the knobs
    whose value varies among the ok trials (a knob set alike in all of them explains nothing).

    Returns a note instead with fewer than MIN_OK_TRIALS ok trials, when no knob varies among
    them, or when they all measured the same.
    """
    import optuna
    from optuna.trial import TrialState

    from tuner.report.study_export import optuna_study

    ok = sum(1 for r in trials if r.measurement.objective is not None)
    if ok < MIN_OK_TRIALS:
        return Importances(note=f"parameter importances need at least {MIN_OK_TRIALS} ok trials; "
                                f"this study has {ok}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna_study(trials, name=name)
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    knobs = {k for t in done for k in t.params}
    varying = sorted(k for k in knobs if len({repr(t.params.get(k)) for t in done}) > 1)
    if not varying:
        return Importances(note="no knob varies among the ok trials, so none has an importance")
    if len({t.value for t in done}) == 1:
        return Importances(note="every ok trial measured the same, so no knob has an importance")
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(
        target_quantile=min(MAX_QUANTILE, max(QUANTILE, TOP_TRIALS / ok)))
    with warnings.catch_warnings():
        # a small study draws Optuna's notes about its quantiles; the page states the method instead
        warnings.filterwarnings("ignore", module="optuna")
        found = optuna.importance.get_param_importances(study, evaluator=evaluator, params=varying)
    ranked = sorted(((k, float(v)) for k, v in found.items() if v > 0), key=lambda item: -item[1])
    if not ranked:
        return Importances(note="no knob made a difference among the ok trials")
    rest = len(ranked) - TOP_KNOBS
    return Importances(values=tuple(ranked[:TOP_KNOBS]),
                       note=f"{rest} less important knob(s) not shown" if rest > 0 else "")
