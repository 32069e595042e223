"""What earlier searches tell a new one before it measures anything: warm starts and learned failures.

Warm starts. After the built-in seeds (Inductor's defaults, the modes, freezing), a search
first tries the stored best configs
1. of the same workload on the other platforms of its device, strongest evidence first
   (ci_low, then speedup, then newest), at most WARM_SAME_WORKLOAD of them;
2. of the nearest other workloads on this platform, nearest first, one config each (its
   strongest), at most WARM_NEAREST of them. Nearness is the cosine similarity of call-target
   counts over the workloads' graphs (`tuner.workload.graph_features`); a workload with no target in
   common (similarity 0) is never near.
A config whose knobs do not fit this space (`SearchSpace.replay_params` raises SpaceError) is
dropped, and a warm start never repeats a seed or an earlier warm start (same Candidate key).
Default-is-best and eager verdicts hold no knobs and are never warm starts.

Learned failures. The driver skips any proposal holding a rule of
`tuner.storage.failures` for its platform (one knob=value, or a pair, that always failed
to compile there), telling Optuna it failed, without measuring it. The rules are recomputed
when the search starts and after every compile error.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tuner.errors import SpaceError
from tuner.keys import Platform, Workload
from tuner.search_spaces import SearchSpace
from tuner.storage import BestConfig, FailureRule, Store, other_platform_bests, refresh_rules, tuned_workloads
from tuner.trial import Candidate, Measurement, Status
from tuner.workload import call_counts, cosine

WARM_SAME_WORKLOAD = 3
WARM_NEAREST = 3


@dataclass(frozen=True)
class WarmStart:
    """One first candidate of a search: the full Optuna params for this space, and why it comes
    first: where a warm start was taken from in the store, "" for a seed of the space."""

    params: dict[str, Any]
    why: str


def first_candidates(store: Store, workload: Workload, platform: Platform, space: SearchSpace,
                     seeds: list[dict[str, Any]], *, warm: bool = True) -> list[WarmStart]:
    """What a search enqueues first, in order: the space's `seeds` (`space.seeds()`, with an
    empty `why`), then (with `warm`) the warm starts (module docstring)."""
    firsts = [WarmStart(params=params, why="") for params in seeds]
    if not warm:
        return firsts
    seen = {space.candidate(params).key for params in seeds}
    return firsts + warm_starts(store, workload, platform, space, seen=seen)


def warm_starts(store: Store, workload: Workload, platform: Platform, space: SearchSpace, *,
                seen: set[str]) -> list[WarmStart]:
    """The warm starts of a search of `workload` on `platform`, in order; `seen` holds the
    Candidate keys already enqueued (and gains those returned). Empty on a fresh database."""
    same = other_platform_bests(store, workload.key, platform.key, device=platform.device)
    picked = _fitting(((b, f"{workload.name} on platform {b.platform_key[:12]}") for b in same),
                      space, seen, WARM_SAME_WORKLOAD)
    mine = call_counts(g.code for g in workload.graphs)
    scored = sorted(((cosine(mine, call_counts(t.codes)), t) for t in tuned_workloads(
        store, platform.key, exclude=workload.key)), key=lambda item: (-item[0], item[1].key))
    near = ((t.best, f"nearest workload {t.name} (similarity {sim:.2f})") for sim, t in scored if sim > 0)
    return picked + _fitting(near, space, seen, WARM_NEAREST)


def _fitting(offers: Iterable[tuple[BestConfig, str]], space: SearchSpace, seen: set[str],
             limit: int) -> list[WarmStart]:
    """Up to `limit` of `offers` ((BestConfig, why) pairs) whose knobs fit `space` and whose
    Candidate is not in `seen`, in order."""
    picked: list[WarmStart] = []
    for best, why in offers:
        if len(picked) == limit:
            break
        params = _fit(best, space)
        key = None if params is None else space.candidate(params).key
        if key is None or key in seen:
            continue
        seen.add(key)
        picked.append(WarmStart(params=params, why=why))
    return picked


def _fit(best: BestConfig, space: SearchSpace) -> dict[str, Any] | None:
    """The full Optuna params of a stored config in this space; None when it does not fit."""
    try:
        return space.replay_params(best.params)
    except SpaceError:
        return None


class LearnedFailures:
    """The learned failure rules of one platform, as a search uses them.

    `refresh()` recomputes them from the store's trials (call it when the search starts);
    `heard(measurement)` does again after a compile error; `skip(candidate)` says whether a
    proposal holds a rule and counts it in `skipped`. A platform not stored has no rules.
    """

    def __init__(self, store: Store, platform_key: str):
        self.store, self.platform_key = store, platform_key
        self.rules: tuple[FailureRule, ...] = ()
        self.skipped = 0

    def refresh(self) -> None:
        self.rules = refresh_rules(self.store, self.platform_key)

    def heard(self, measurement: Measurement) -> None:
        if measurement.status is Status.COMPILE_ERROR:
            self.refresh()

    def skip(self, candidate: Candidate) -> bool:
        params = candidate.as_dict()
        if any(rule.held_by(params) for rule in self.rules):
            self.skipped += 1
            return True
        return False
