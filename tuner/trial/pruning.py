"""Pruning: stop a trial's paired rounds early when it is clearly slower than the finished trials.

A trial times its candidate against Inductor's defaults in interleaved rounds
(`tuner.trial.interleaved_rounds`). Its value at step k is the objective after k rounds: the
paired ratio candidate/default, 1 / (median of the per-round default/candidate ratios so far),
so the last step's value is the trial's `Measurement.objective`. After each round the trial
would otherwise go on from, `RoundPruner.should_stop` asks an Optuna pruner whether the trial
is hopeless against the value sequences of the trials that finished before it (`PruneSpec`).

The decision is a pure function of the spec and the trial's values, so the real trial process
and the replay executor (`tuner.workers.replay`) stop at the same step. It never prunes before
`min_rounds` rounds, nor while fewer than `min_trials` finished trials reached that round.
Optuna is imported only when a pruner actually runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from tuner.errors import UsageError
from tuner.trial.stats import paired_speedup

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


def _median(spec: PruneSpec) -> BasePruner:
    from optuna.pruners import MedianPruner

    return MedianPruner(n_startup_trials=spec.min_trials, n_warmup_steps=spec.min_rounds,
                        n_min_trials=spec.min_trials)


def _percentile(spec: PruneSpec) -> BasePruner:
    from optuna.pruners import PercentilePruner

    return PercentilePruner(spec.percentile, n_startup_trials=spec.min_trials, n_warmup_steps=spec.min_rounds,
                            n_min_trials=spec.min_trials)


def _nothing(spec: PruneSpec) -> BasePruner:
    from optuna.pruners import NopPruner

    return NopPruner()


# Name -> factory. "median" prunes a trial whose best value so far is above the median of the
# finished trials at the same round; "percentile" only above `PruneSpec.percentile` (75: the
# slowest quarter); "none" never prunes.
PRUNERS: dict[str, Callable[[PruneSpec], BasePruner]] = {
    "median": _median,
    "percentile": _percentile,
    "none": _nothing,
}
# What a pruned trial was compared with, per pruner, for its error line.
_COMPARED_WITH = {"median": "the median", "percentile": "the {p:g}th percentile"}


@dataclass(frozen=True)
class PruneSpec:
    """What a trial needs to decide pruning on its own: the pruner, its settings, and the value
    sequences (`Measurement.intermediate`) of the trials that completed before it.

    Made with an unknown pruner name it raises UsageError naming the choices.
    """

    pruner: str = "median"
    history: tuple[tuple[float, ...], ...] = ()
    min_rounds: int = 6         # never prune before this many rounds (the round plan's minimum)
    min_trials: int = 5         # nor while fewer finished trials reached the round
    percentile: float = 75.0    # "percentile": prune above this percentile of the finished trials

    def __post_init__(self) -> None:
        check_pruner(self.pruner)

    @property
    def active(self) -> bool:
        """Whether any trial could be pruned with this history."""
        return self.pruner != "none" and sum(1 for values in self.history if values) >= self.min_trials

    def to_json(self) -> dict[str, Any]:
        return {"pruner": self.pruner, "history": [list(values) for values in self.history],
                "min_rounds": self.min_rounds, "min_trials": self.min_trials, "percentile": self.percentile}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PruneSpec:
        fields = dict(data)
        fields["history"] = tuple(tuple(float(v) for v in values) for values in fields.get("history", ()))
        return cls(**fields)


def check_pruner(name: str) -> None:
    """Raise UsageError unless `name` is a key of PRUNERS."""
    if name not in PRUNERS:
        raise UsageError(f"unknown pruner {name!r}; choose one of: {', '.join(PRUNERS)}")


def step_value(baseline_ms: Sequence[float], candidate_ms: Sequence[float]) -> float:
    """The value after these paired rounds: 1 / median(default/candidate), the trial's objective
    had it stopped there (inf when no round has a positive candidate time)."""
    sp = paired_speedup(baseline_ms, candidate_ms)
    return 1.0 / sp.median if sp is not None and sp.median > 0 else float("inf")


def step_values(baseline_ms: Sequence[float], candidate_ms: Sequence[float]) -> tuple[float, ...]:
    """The value after each paired round (`step_value` of rounds 1..k for every k)."""
    return RoundValues().all(baseline_ms, candidate_ms)


class RoundValues:
    """A trial's value after each paired round, each computed once: the pruner asks for the
    latest between rounds (`should_stop`), and `Measurement.intermediate` takes them all at the
    end (`all`). Without a pruner it never stops."""

    def __init__(self, pruner: RoundPruner | None = None):
        self.pruner = pruner
        self._values: list[float] = []

    def all(self, baseline_ms: Sequence[float], candidate_ms: Sequence[float]) -> tuple[float, ...]:
        """The values after rounds 1..k, k the rounds paired so far (the earlier ones are kept)."""
        for k in range(len(self._values) + 1, min(len(baseline_ms), len(candidate_ms)) + 1):
            self._values.append(step_value(baseline_ms[:k], candidate_ms[:k]))
        return tuple(self._values)

    def should_stop(self, baseline_ms: Sequence[float], candidate_ms: Sequence[float]) -> bool:
        """The pruner's decision on the value after the latest round."""
        values = self.all(baseline_ms, candidate_ms)
        return self.pruner is not None and bool(values) and self.pruner.should_stop(len(values), values[-1])


class RoundPruner:
    """Round-by-round pruning of one trial: an in-memory Optuna study holding the spec's history
    as completed trials, and one asked trial that reports this trial's values.

    Call `should_stop(step, value)` after each round the trial would otherwise go on from, with
    steps 1, 2, ... in order; once it returns True, `stopped_at` is that step and `best` the
    value compared. With an inactive spec nothing is built and it never stops.
    """

    def __init__(self, spec: PruneSpec):
        self.spec = spec
        self.stopped_at: int | None = None
        self.best: float | None = None
        self._trial: Any = None
        if spec.active:
            self._trial = _study_with_history(spec).ask()

    def should_stop(self, step: int, value: float) -> bool:
        """Report `value` at `step`; True when the pruner stops the trial here (never before min_rounds)."""
        self.best = value if self.best is None else min(self.best, value)
        if self._trial is None:
            return False
        self._trial.report(value, step)
        if step < self.spec.min_rounds or not self._trial.should_prune():
            return False
        self.stopped_at = step
        return True

    def reason(self) -> str:
        """One line for a pruned trial's error: where it stopped, its best ratio candidate/default
        so far, and what Optuna's pruner found it above (among the finished trials at that round)."""
        step = self.stopped_at or 0
        compared = _COMPARED_WITH.get(self.spec.pruner, self.spec.pruner).format(p=self.spec.percentile)
        reached = sum(1 for values in self.spec.history if len(values) >= step)
        return (f"pruned after {step} rounds: ratio {self.best:.3f}, above {compared} of the "
                f"{reached} finished trials at that round")


def replay_pruning(spec: PruneSpec, values: Sequence[float]) -> RoundPruner:
    """Replay the pruning of a trial whose recorded value sequence is `values`: the pruner is
    asked after every step but the last (where the trial stopped on its own rule). The returned
    pruner's `stopped_at` is the step it stopped at, None when the trial ran to its end."""
    pruner = RoundPruner(spec)
    for step, value in enumerate(values[:-1], start=1):
        if pruner.should_stop(step, value):
            break
    return pruner


def _study_with_history(spec: PruneSpec) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", pruner=PRUNERS[spec.pruner](spec),
                                sampler=optuna.samplers.RandomSampler(seed=0))
    for values in spec.history:
        if values:
            study.add_trial(optuna.trial.create_trial(
                value=values[-1], intermediate_values={step: v for step, v in enumerate(values, start=1)}))
    return study


class PruneHistory:
    """The driver's side of pruning: the step values of the trials completed in this search, and
    the PruneSpec each new trial gets. Candidates in `exempt` (the defaults and the built-in
    modes, the floor every search is judged against) are never pruned, nor any with "none"."""

    def __init__(self, pruner: str, *, min_rounds: int, exempt: Iterable[str] = ()):
        check_pruner(pruner)
        self.pruner, self.min_rounds, self.exempt = pruner, min_rounds, frozenset(exempt)
        self.history: list[tuple[float, ...]] = []

    def add(self, values: Sequence[float]) -> None:
        """Remember a completed trial's step values (`Measurement.intermediate`; empty: nothing)."""
        if values:
            self.history.append(tuple(values))

    def spec_for(self, candidate_key: str) -> PruneSpec | None:
        """The PruneSpec for a new trial of `candidate_key`; None when it is never pruned."""
        if self.pruner == "none" or candidate_key in self.exempt:
            return None
        return PruneSpec(self.pruner, tuple(self.history), min_rounds=self.min_rounds)
