"""Replay executor: hands back recorded measurements instead of running trials.

For what cannot run here (a GPU): measurements recorded on real hardware replay through
the same driver, so search logic (ask/tell, dedupe, resume, capacity) is tested without
the device. A candidate with no recording comes back as a runtime error saying so.
"""
from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Mapping, Sequence

from tuner.confirm import ConfirmFailed, ConfirmRequest, ConfirmResult, VariantResult
from tuner.trial import Candidate, Measurement, Status, TrialRequest


EAGER_KEY = "eager"


class ReplayExecutor:
    """`recorded` maps Candidate.key to the Measurement that candidate produced.

    `rounds` maps Candidate.key (or EAGER_KEY for the uncompiled model) to per-round
    latencies recorded in one interleaved confirmation run; a confirmation replays them,
    round i of every variant paired with round i of the others (cycling when it asks for
    more rounds than were recorded). With no `rounds`, a confirmation fails as not recorded.
    """

    def __init__(self, recorded: Mapping[str, Measurement], *, capacity: int = 1,
                 rounds: Mapping[str, Sequence[float]] | None = None):
        self.capacity = capacity
        self.recorded = dict(recorded)
        self.rounds = {key: tuple(ms) for key, ms in (rounds or {}).items()}
        self.confirmations: list[ConfirmRequest] = []
        self.submitted: list[TrialRequest] = []
        self.most_in_flight = 0
        self._pending: deque[TrialRequest] = deque()

    @classmethod
    def from_file(cls, path: str | Path, *, capacity: int = 1) -> "ReplayExecutor":
        """A JSON list of {"params": {knob: value}, "measurement": Measurement.to_json()}."""
        rows = json.loads(Path(path).read_text())
        return cls({Candidate.from_dict(r["params"]).key: Measurement.from_json(r["measurement"]) for r in rows},
                   capacity=capacity)

    def submit(self, request: TrialRequest) -> None:
        self.submitted.append(request)
        self._pending.append(request)
        self.most_in_flight = max(self.most_in_flight, len(self._pending))

    def next_result(self) -> tuple[TrialRequest, Measurement]:
        if not self._pending:
            raise LookupError("no trial is pending")
        request = self._pending.popleft()
        found = self.recorded.get(request.candidate.key)
        if found is None:
            found = Measurement.failed(Status.RUNTIME_ERROR, f"no recorded measurement for {request.candidate.label()}")
        return request, found

    def pending(self) -> int:
        return len(self._pending)

    def run_confirmation(self, request: ConfirmRequest) -> ConfirmResult | ConfirmFailed:
        if not self.rounds:
            return ConfirmFailed(Status.RUNTIME_ERROR, "the replay executor has no recorded confirmation")
        self.confirmations.append(request)
        variants = []
        for label, params in request.variants:
            recorded = self.rounds.get(EAGER_KEY if params is None else Candidate(params).key)
            if not recorded:
                variants.append(VariantResult(label, Status.RUNTIME_ERROR, error=f"no recorded rounds for {label}"))
                continue
            ms = tuple(recorded[i % len(recorded)] for i in range(request.rounds))
            variants.append(VariantResult(label, Status.OK, compile_s=0.0, round_ms=ms))
        return ConfirmResult(variants=tuple(variants))

    def platforms(self) -> None:
        """None: replays place nothing by platform."""
        return None

    def cancel(self) -> None:
        """Drop what was submitted and not handed back: nothing runs, so nothing is killed."""
        self._pending.clear()

    def close(self) -> None:
        self.cancel()
