"""Replay executor: hands back recorded measurements instead of running trials.

For what cannot run here (a GPU): measurements recorded on real hardware replay through
the same driver, so search logic (ask/tell, dedupe, resume, capacity) is tested without
the device. A candidate with no recording comes back as a runtime error saying so.
It honours pruning as the real trial process does (`tuner.trial.pruning`), and can add noise, so a
search's robustness to both is tested on tables with a known answer.
"""
from __future__ import annotations

import json
import math
import random
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from tuner.trial import (DEFAULT, Candidate, ConfirmFailed, ConfirmRequest, ConfirmResult, Measurement,
                         ProcessRequest, ProcessTiming, Status, TrialRequest, VariantResult, decided, replay_pruning)


EAGER_KEY = "eager"


class ReplayExecutor:
    """`recorded` maps Candidate.key to the Measurement that candidate produced.

    `rounds` maps Candidate.key (or EAGER_KEY for the uncompiled model) to per-round
    latencies recorded in one interleaved confirmation run; a confirmation replays them,
    round i of every variant paired with round i of the others (cycling when it asks for
    more rounds than were recorded). With no `rounds`, a confirmation fails as not recorded.

    A confirmation runs the sequential test of its request (`ConfirmRequest.looks`) on those rounds,
    each multiplied by a factor of `round_noise` (a lognormal sigma; 0: none), so a run stops where a
    confirmation process would and two runs differ as two processes do (cycling repeats rounds, and an
    interval over repeats narrows with no new evidence: record as many rounds as the last look takes).

    `noise` (a lognormal sigma; 0: none) multiplies each answered OK or pruned trial's latency,
    paired ratio candidate/default and step values by one factor drawn per submission from a
    generator seeded with `seed`, so a candidate answered twice differs. A request with a
    `PruneSpec` whose recorded measurement has step values (`Measurement.intermediate`) is
    answered PRUNED, cut at the step the real trial process would have stopped at.
    """

    def __init__(self, recorded: Mapping[str, Measurement], *, capacity: int = 1,
                 rounds: Mapping[str, Sequence[float]] | None = None, noise: float = 0.0, seed: int = 0,
                 round_noise: float = 0.0):
        self.capacity = capacity
        self.recorded = dict(recorded)
        self.rounds = {key: tuple(ms) for key, ms in (rounds or {}).items()}
        self.noise, self.round_noise = noise, round_noise
        self._rng = random.Random(seed)
        self.confirmations: list[ConfirmRequest] = []
        self.processes: list[ProcessRequest] = []
        self._served: dict[str, int] = {}
        self.submitted: list[TrialRequest] = []
        self.most_in_flight = 0
        self._pending: deque[TrialRequest] = deque()
        self._factors: deque[float] = deque()       # the noise factor of each pending request, in order

    @classmethod
    def from_file(cls, path: str | Path, *, capacity: int = 1, noise: float = 0.0, seed: int = 0) -> "ReplayExecutor":
        """A JSON list of {"params": {knob: value}, "measurement": Measurement.to_json()}, or an object
        whose "rows" is that list (a recorded space table; its other keys are ignored here)."""
        data: Any = json.loads(Path(path).read_text())
        rows = data["rows"] if isinstance(data, dict) else data
        return cls({Candidate.from_dict(r["params"]).key: Measurement.from_json(r["measurement"]) for r in rows},
                   capacity=capacity, noise=noise, seed=seed)

    def submit(self, request: TrialRequest) -> None:
        """Queue `request`; its noise factor is drawn now, so answers depend only on submission order."""
        self.submitted.append(request)
        factor = math.exp(self._rng.gauss(0.0, self.noise)) if self.noise else 1.0
        self._pending.append(request)
        self._factors.append(factor)
        self.most_in_flight = max(self.most_in_flight, len(self._pending))

    def next_result(self) -> tuple[TrialRequest, Measurement]:
        if not self._pending:
            raise LookupError("no trial is pending")
        request, factor = self._pending.popleft(), self._factors.popleft()
        found = self.recorded.get(request.candidate.key)
        if found is None:
            return request, Measurement.failed(Status.RUNTIME_ERROR,
                                               f"no recorded measurement for {request.candidate.label()}")
        return request, _pruned(_noisy(found, factor), request)

    def pending(self) -> int:
        return len(self._pending)

    def run_confirmation(self, request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
        if not self.rounds:
            return ConfirmFailed(Status.RUNTIME_ERROR, "the replay executor has no recorded confirmation")
        self.confirmations.append(request)
        found = {label: self.rounds.get(EAGER_KEY if params is None else Candidate(params).key)
                 for label, params in request.variants}
        plan = request.plan()
        live = {label: recorded for label, recorded in found.items() if recorded}
        looks = plan.looks or (request.rounds,)
        baseline = DEFAULT if DEFAULT in live else next(iter(live), "")
        # The sequential test as the confirmation process runs it (tuner.trial.timing.decided), on
        # the recorded rounds (cycling), each times this run's noise.
        factors = [[self._factor() for _ in range(looks[-1])] for _ in live]
        count = looks[-1]
        for look in looks:
            ms = {label: [rec[i % len(rec)] * f[i] for i in range(look)] for (label, rec), f in zip(live.items(), factors)}
            if look == looks[-1] or (plan.looks and decided(ms, baseline, plan)):
                count = look
                break
        variants = []
        for (label, recorded), f in zip(live.items(), factors):
            variants.append(VariantResult(label, Status.OK, compile_s=0.0,
                                          round_ms=tuple(recorded[i % len(recorded)] * f[i] for i in range(count))))
        done = {v.label: v for v in variants}
        return ConfirmResult(variants=tuple(done.get(label) or VariantResult(label, Status.RUNTIME_ERROR,
                                                                             error=f"no recorded rounds for {label}")
                                            for label in found))

    def _factor(self) -> float:
        return math.exp(self._rng.gauss(0.0, self.round_noise)) if self.round_noise else 1.0

    def run_process(self, request: ProcessRequest) -> ProcessTiming:
        """A timing process from the recorded confirmation rounds: its config's next round, times a
        noise factor as a trial's. Runtime knobs were never recorded: such a request fails, saying so."""
        if request.runtime:
            return ProcessTiming.failed(request.label, Status.RUNTIME_ERROR,
                                        "the replay executor has no recorded runtime knob measurement")
        key = EAGER_KEY if request.params is None else Candidate(request.params).key
        recorded = self.rounds.get(key)
        if not recorded:
            return ProcessTiming.failed(request.label, Status.RUNTIME_ERROR, f"no recorded rounds for {request.label}")
        self.processes.append(request)
        served = self._served.get(key, 0)
        self._served[key] = served + 1
        factor = math.exp(self._rng.gauss(0.0, self.noise)) if self.noise else 1.0
        ms = recorded[served % len(recorded)] * factor
        return ProcessTiming(request.label, Status.OK, samples_ms=(ms,), latency_ms=ms, compile_s=0.0)

    def platforms(self) -> None:
        """None: replays place nothing by platform."""
        return None

    def cancel(self) -> None:
        """Drop what was submitted and not handed back: nothing runs, so nothing is killed."""
        self._pending.clear()
        self._factors.clear()

    def close(self) -> None:
        self.cancel()


def _noisy(m: Measurement, factor: float) -> Measurement:
    """`m` with its latency and ratio candidate/default scaled by `factor` (speedups divided by it)."""
    if factor == 1.0 or m.status not in (Status.OK, Status.PRUNED):
        return m

    def scaled(value: float | None, by: float) -> float | None:
        return None if value is None else value * by

    return replace(m, latency_ms=scaled(m.latency_ms, factor), spread_ms=scaled(m.spread_ms, factor),
                   speedup=scaled(m.speedup, 1 / factor), speedup_low=scaled(m.speedup_low, 1 / factor),
                   speedup_high=scaled(m.speedup_high, 1 / factor),
                   intermediate=tuple(v * factor for v in m.intermediate))


def _pruned(m: Measurement, request: TrialRequest) -> Measurement:
    """`m` cut where the request's pruner stops it (the same rule as the trial process), else `m`.
    The cut keeps the value at the stopping step as its ratio; the interval of that many rounds
    is not recorded, so it is left out."""
    if request.pruning is None or not m.ok or not m.intermediate:
        return m
    pruner = replay_pruning(request.pruning, m.intermediate)
    step = pruner.stopped_at
    if step is None:
        return m
    ratio = m.intermediate[step - 1]
    latency = m.baseline_ms * ratio if m.baseline_ms is not None else m.latency_ms
    return replace(m, status=Status.PRUNED, latency_ms=latency, spread_ms=None, reps=step, speedup=1.0 / ratio,
                   speedup_low=None, speedup_high=None, intermediate=m.intermediate[:step], error=pruner.reason())
