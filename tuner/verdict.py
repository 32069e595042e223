"""From trials to a stored best config: pick finalists, confirm them, decide, report.

A finalist becomes the best config only if its paired speedup over the default
compile clears the measured noise (the lower end of its interval is above 1).
Otherwise the verdict is "defaults are best", which is stored too, so lookup knows
the workload was tuned.
"""
from __future__ import annotations

import datetime as dt
import socket
from dataclasses import dataclass

from tuner.confirm import DEFAULT, EAGER, ConfirmRequest, ConfirmResult, Speedup, speedup
from tuner.errors import TunerError
from tuner.platform import Platform
from tuner.storage.records import BestConfig, StudyInfo, TrialRecord
from tuner.trial import Candidate, MeasureSpec
from tuner.version import __version__
from tuner.workload import Workload

MODE_PREFIX = "mode "


@dataclass(frozen=True)
class Finalist:
    label: str
    candidate: Candidate


@dataclass(frozen=True)
class Verdict:
    """The decision and the evidence behind it."""

    winner: Finalist | None                 # None: Inductor's defaults stay
    speedups: tuple[tuple[str, Speedup | None], ...]
    result: ConfirmResult
    finalists: tuple[Finalist, ...]

    def speedup_of(self, label: str) -> Speedup | None:
        return dict(self.speedups).get(label)


def pick_finalists(records: tuple[TrialRecord, ...], *, top: int = 2) -> tuple[Finalist, ...]:
    """The best built-in mode (if one ran ok) and the `top` fastest other ok candidates."""
    ok = sorted((r for r in records if r.measurement.ok and r.params), key=lambda r: r.measurement.latency_ms)
    modes = [r for r in ok if set(r.params) == {"mode"}]
    finalists = [Finalist(MODE_PREFIX + str(modes[0].params["mode"]), Candidate.from_dict(modes[0].params))] if modes else []
    others = [r for r in ok if not modes or r is not modes[0]][:top]
    finalists += [Finalist(f"tuned #{i + 1}", Candidate.from_dict(r.params)) for i, r in enumerate(others)]
    return tuple(finalists)


def confirmation_request(spec: MeasureSpec, finalists: tuple[Finalist, ...], *, rounds: int) -> ConfirmRequest:
    """Eager, the default compile and each finalist, measured as `spec` says."""
    variants = ((EAGER, None), (DEFAULT, ()), *((f.label, f.candidate.params) for f in finalists))
    return ConfirmRequest(spec=spec, variants=variants, rounds=rounds)


def decide(result: ConfirmResult, finalists: tuple[Finalist, ...]) -> Verdict:
    """The finalist with the highest median speedup among those that clear the noise, else defaults."""
    baseline = result.get(DEFAULT)
    if baseline is None or not baseline.round_ms:
        raise TunerError(f"confirmation could not measure the default compile: "
                         f"{baseline.error if baseline else result.error}; rerun the search with --debug")
    speedups = [(v.label, speedup(baseline, v) if v.round_ms else None) for v in result.variants]
    by_label = dict(speedups)
    winners = [f for f in finalists if by_label.get(f.label) and by_label[f.label].clears_noise]
    winner = max(winners, key=lambda f: by_label[f.label].median, default=None)
    return Verdict(winner=winner, speedups=tuple(speedups), result=result, finalists=finalists)


def best_configs(verdict: Verdict, *, workload: Workload, platform: Platform, study: StudyInfo,
                 user: str) -> list[BestConfig]:
    """One BestConfig per graph of the workload (the whole model shares one config)."""
    base = verdict.result.get(DEFAULT)
    if verdict.winner is None:
        params, is_default = {}, True
        sp = Speedup(1.0, 1.0, 1.0, len(base.round_ms))
        latency = base.latency_ms
    else:
        params, is_default = verdict.winner.candidate.as_dict(), False
        sp = verdict.speedup_of(verdict.winner.label)
        latency = verdict.result.get(verdict.winner.label).latency_ms
    software = dict(platform.software)
    return [BestConfig(graph_key=g.key, platform_key=platform.key, params=params, is_default=is_default,
                       speedup=sp.median, ci_low=sp.low, ci_high=sp.high, rounds=sp.rounds,
                       latency_ms=latency, baseline_ms=base.latency_ms, workload_key=workload.key,
                       study_id=study.id, user=user, host=socket.gethostname(), tuner_version=__version__,
                       torch_version=software.get("torch", ""), triton_version=software.get("triton", ""),
                       created_at=dt.datetime.now(dt.timezone.utc))
            for g in workload.graphs]
