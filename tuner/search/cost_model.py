"""A learned cost model that ranks a sampler's proposals before any is measured (`--cost-model`).

As in TVM's search, the driver draws up to PROPOSALS new candidates from the sampler and
measures the one this model ranks best (`CostRanker.best`); the others are told failed,
unmeasured, so no sampler learns a value for them (TPE leaves failed trials out of its model).

Examples: every stored trial of the device (`tuner.storage.training_data`), read when the
search starts, and this search's trials as they finish. Label: the log of the paired ratio
candidate/default (`Measurement.objective`; a pruned trial's ratio at its last round). Each
workload's ratio is to its own defaults, so examples of other workloads and platforms share
one scale. Failures (compile or runtime errors, crashes, wrong results) are a second label,
fitted apart; timeouts and cancelled trials say nothing and are left out.

Features: the knobs of the searched space (`Encoder`: a bool is one column; a choice, and an
int or stepped float of at most MAX_ONE_HOT values, one column per non-default value; a wider
range its position and the square of it; a child inactive under its parent is all zeros) and
the product of every pair of columns of different knobs (interactions: max_autotune pays only
with freezing). Knobs a stored trial sets that this space lacks are dropped. The graph
features of a workload (call-target counts, `tuner.workload.graph_features`) add nothing to a ranking
within one workload as regressors (a per-workload constant), so they enter as weights: an
example of another workload counts OTHER_WORKLOAD_FLOOR plus the rest times the cosine of the
two workloads' counts; one of another platform counts OTHER_PLATFORM as much.

Model: weighted ridge regression on sufficient statistics (adding an example is a rank-one
update; a fit is one solve), numpy only. Score = predicted log ratio + FAIL_COST times the
predicted failure rate (clipped to [0, 1]); lowest first. Deterministic: no randomness at all.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tuner.keys import Platform, Workload
from tuner.search_spaces import Knob, SearchSpace
from tuner.trial import Candidate, Measurement, Status
from tuner.workload import call_counts, cosine

PROPOSALS = 8                 # candidates drawn per measured trial
MIN_EXAMPLES = 8              # labelled examples before the model ranks anything
RIDGE = 1.0
FAIL_COST = 0.5               # a sure failure ranks like a 1.65x slower candidate
MAX_ONE_HOT = 16
MAX_PAIRED_COLUMNS = 64       # wider spaces get main effects only (a fit solves columns^2/2 unknowns)
OTHER_PLATFORM = 0.5
OTHER_WORKLOAD_FLOOR = 0.25
FAILED = (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.CRASHED, Status.WRONG_RESULT)
NO_LABEL = (Status.TIMEOUT, Status.CANCELLED)


class Encoder:
    """Knob params -> feature vector for one space (module docstring: Features)."""

    def __init__(self, space: SearchSpace):
        self.space = space
        self.columns: list[tuple[str, Any]] = []        # (knob, value) or (knob, "pos"/"pos2")
        for knob in space.knobs:
            self.columns += _knob_columns(knob)
        self.index = {column: i for i, column in enumerate(self.columns)}
        m = len(self.columns)
        self.pairs = [] if m > MAX_PAIRED_COLUMNS else [
            (i, j) for i in range(m) for j in range(i + 1, m) if self.columns[i][0] != self.columns[j][0]]
        self.width = 1 + m + len(self.pairs)

    def encode(self, params: Mapping[str, Any]) -> np.ndarray:
        """The features of a Candidate's params (knobs this space lacks, or values outside a
        knob's domain, are dropped); first column the intercept."""
        main = np.zeros(len(self.columns))
        for name, value in self._complete(params).items():
            knob = self.space.knob(name)
            if knob.kind in ("int", "float") and (name, "pos") in self.index:
                pos = _position(knob, value)
                main[self.index[(name, "pos")]], main[self.index[(name, "pos2")]] = pos, pos * pos
            elif (name, _hashable(value)) in self.index:
                main[self.index[(name, _hashable(value))]] = 1.0
        pairs = np.array([main[i] * main[j] for i, j in self.pairs])
        return np.concatenate(([1.0], main, pairs))

    def _complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        names = {k.name for k in self.space.knobs}
        kept = {n: v for n, v in params.items() if n in names and self.space.knob(n).value_problem(v) is None}
        return self.space.complete(kept)


def _knob_columns(knob: Knob) -> list[tuple[str, Any]]:
    if knob.kind == "bool":
        return [(knob.name, True)]
    if knob.kind == "choice":
        return [(knob.name, _hashable(c)) for c in knob.choices if _hashable(c) != _hashable(knob.default)]
    values = _few_values(knob)
    if values is not None:
        return [(knob.name, v) for v in values if v != knob.default]
    return [(knob.name, "pos"), (knob.name, "pos2")]


def _few_values(knob: Knob) -> list[Any] | None:
    """The values of a stepped range of at most MAX_ONE_HOT of them; None for a wider or continuous one."""
    if knob.step is None and knob.kind == "float":
        return None
    step = knob.step or 1
    count = int((knob.high - knob.low) / step + 1e-9) + 1
    if count > MAX_ONE_HOT:
        return None
    if knob.kind == "int":
        return [int(knob.low) + i * int(step) for i in range(count)]
    return [float(f"{knob.low + i * step:.12g}") for i in range(count)]


def _position(knob: Knob, value: float) -> float:
    low, high, v = float(knob.low), float(knob.high), float(value)
    if knob.log:
        low, high, v = math.log(low), math.log(high), math.log(v)
    return 0.0 if high == low else (v - low) / (high - low)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


class _Ridge:
    """Weighted ridge regression kept as sufficient statistics (X'WX, X'Wy)."""

    def __init__(self, width: int):
        self.xtx = np.zeros((width, width))
        self.xty = np.zeros(width)
        self.weight = 0.0
        self._coef: np.ndarray | None = None

    def add(self, x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> None:
        """Add the rows of `x` (one example each) with their labels and weights."""
        if len(x) == 0:
            return
        self.xtx += (x * weight[:, None]).T @ x
        self.xty += (weight * y) @ x
        self.weight += float(weight.sum())
        self._coef = None

    def coef(self) -> np.ndarray:
        if self._coef is None:
            penalty = RIDGE * np.eye(len(self.xty))
            penalty[0, 0] = 1e-9                    # the intercept is not shrunk (only kept solvable)
            self._coef = np.linalg.solve(self.xtx + penalty, self.xty)
        return self._coef


class CostModel:
    """The model of one search's space: add examples, then `scores` ranks params."""

    def __init__(self, space: SearchSpace):
        self.encoder = Encoder(space)
        self.latency = _Ridge(self.encoder.width)
        self.fails = _Ridge(self.encoder.width)
        self.labelled = 0

    def add(self, params: Mapping[str, Any], measurement: Measurement, weight: float) -> None:
        """Learn one measured trial (module docstring: what each status teaches)."""
        self.add_all([(params, measurement, weight)])

    def add_all(self, examples: Iterable[tuple[Mapping[str, Any], Measurement, float]]) -> None:
        """Learn (params, measurement, weight) examples at once (one matrix product, not one per example)."""
        kept = [(self.encoder.encode(p), m, w) for p, m, w in examples if m.status not in NO_LABEL and w > 0]
        if not kept:
            return
        x = np.array([row for row, _, _ in kept])
        weight = np.array([w for _, _, w in kept])
        self.fails.add(x, np.array([float(m.status in FAILED) for _, m, _ in kept]), weight)
        ratios = [_ratio(m) for _, m, _ in kept]
        labelled = [i for i, r in enumerate(ratios) if r is not None and r > 0]
        self.latency.add(x[labelled], np.log([ratios[i] for i in labelled]), weight[labelled])
        self.labelled += len(labelled)

    def scores(self, params: Iterable[Mapping[str, Any]]) -> np.ndarray:
        """Predicted log ratio plus the failure cost, per params; lower ranks first."""
        x = np.array([self.encoder.encode(p) for p in params])
        fail = np.clip(x @ self.fails.coef(), 0.0, 1.0) if self.fails.weight else np.zeros(len(x))
        return x @ self.latency.coef() + FAIL_COST * fail


def _ratio(measurement: Measurement) -> float | None:
    if measurement.status is Status.PRUNED:
        steps = measurement.steps
        return steps[max(steps)] if steps else None
    return measurement.objective


class CostRanker:
    """What the driver holds with `--cost-model`: the model of its target, loaded from the
    store when the search starts (`load`), told each result (`heard`), asked to pick (`best`)."""

    def __init__(self, workload: Workload, platform: Platform, space: SearchSpace):
        self.workload, self.platform, self.space = workload, platform, space
        self.model = CostModel(space)

    @property
    def ready(self) -> bool:
        """Whether the model has enough labelled examples to rank proposals."""
        return self.model.labelled >= MIN_EXAMPLES

    def load(self, store: Any) -> None:
        """Learn every stored trial of the platform's device, weighed by workload and platform."""
        from tuner.storage import device_trials, workload_codes

        trials = device_trials(store, self.platform.device)
        others = sorted({t.workload_key for t in trials} - {self.workload.key})
        mine = call_counts(g.code for g in self.workload.graphs)
        near = {key: cosine(mine, call_counts(codes)) for key, codes in workload_codes(store, others).items()}
        self.model.add_all((trial.params, trial.measurement, self._weight(trial.workload_key, trial.platform_key, near))
                           for trial in trials)

    def _weight(self, workload_key: str, platform_key: str, near: Mapping[str, float]) -> float:
        weight = 1.0 if platform_key == self.platform.key else OTHER_PLATFORM
        if workload_key != self.workload.key:
            weight *= OTHER_WORKLOAD_FLOOR + (1 - OTHER_WORKLOAD_FLOOR) * near.get(workload_key, 0.0)
        return weight

    def heard(self, candidate: Candidate, measurement: Measurement) -> None:
        self.model.add(candidate.as_dict(), measurement, 1.0)

    def best(self, candidates: list[Candidate]) -> int:
        """The index of the candidate the model ranks first (the earliest proposal on a tie)."""
        return int(np.argmin(self.model.scores(c.as_dict() for c in candidates)))
