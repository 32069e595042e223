"""Learned failures: knob values and pairs that always fail to compile on a platform.

The rule: on one platform, a knob=value (a single), or a pair of them, is learned as failing
when at least MIN_FAILURES trials holding it failed with status compile_error and no trial
holding it compiled. Compiled means any other status except timeout and cancelled, which
say nothing about compiling (a runtime error, a wrong result, a crash or a pruned trial all
compiled first). A pair is learned only from the failed trials that no learned single
explains, so a knob that fails on its own does not drag every knob it was tried with into a
pair. A trial holds a knob=value when its params (Candidate.as_dict(): the non-default knobs)
set it; values compare as canonical JSON.

The scope is the platform (hardware and software keys together): whether code compiles
depends on the software (torch, triton, CUDA) and the device type, but also on hardware
fields that the platform key holds and the software key does not: on CPU, the C++ GEMM
thread factors must multiply to the thread count; on CUDA, Triton features depend on the
compute capability. Identical machines share a platform key, so a team's rules still travel
through export and merge.

Rules learned here (source "search") are recomputed from the trials table by `refresh_rules`
(the driver calls it when a search starts and after each compile error); imported and merged
rules keep the larger evidence and are dropped once a local trial holding them compiles.
Every function runs in one `Store.session_scope()` or in the caller's session.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from tuner.keys import canonical_json
from tuner.storage.models import FailureRuleRow, PlatformRow, StudyRow, TrialRow, utcnow
from tuner.storage.queries import insert, to_platform
from tuner.storage.records import FailureRule, Snapshot, rule_key
from tuner.trial import Status

MIN_FAILURES = 2
NO_EVIDENCE = (Status.TIMEOUT, Status.CANCELLED)    # neither compiled nor failed to compile
Item = tuple[str, str]                              # (knob, canonical JSON of its value)


@dataclass(frozen=True)
class Learned:
    """What the trials of one platform teach: the rules (rule key -> (knobs, failures)) and
    every single and pair that some compiled trial holds."""

    rules: dict[str, tuple[dict[str, Any], int]]
    compiled: frozenset[tuple[Item, ...]]

    def contradicts(self, knobs: Mapping[str, Any]) -> bool:
        """Whether a trial holding these knobs compiled (the rule does not hold here)."""
        return _items(knobs) in self.compiled


def learn(trials: Iterable[tuple[Mapping[str, Any], Status]]) -> Learned:
    """The rules that (params, status) pairs of one platform's trials support (module docstring)."""
    failed: list[tuple[Item, ...]] = []
    compiled: set[tuple[Item, ...]] = set()
    for params, status in trials:
        items = _items(params)
        if status is Status.COMPILE_ERROR:
            failed.append(items)
        elif status not in NO_EVIDENCE:
            compiled.update(_subsets(items))
    singles = Counter((item,) for items in failed for item in items)
    found = {s: n for s, n in singles.items() if n >= MIN_FAILURES and s not in compiled}
    unexplained = [items for items in failed if not any((item,) in found for item in items)]
    pairs = Counter(pair for items in unexplained for pair in combinations(items, 2))
    found.update((p, n) for p, n in pairs.items() if n >= MIN_FAILURES and p not in compiled)
    rules = {}
    for subset, count in found.items():
        knobs = {name: json.loads(value) for name, value in subset}
        rules[rule_key(knobs)] = (knobs, count)
    return Learned(rules=rules, compiled=frozenset(compiled))


def _items(params: Mapping[str, Any]) -> tuple[Item, ...]:
    return tuple(sorted((name, canonical_json(value)) for name, value in params.items()))


def _subsets(items: tuple[Item, ...]) -> Iterator[tuple[Item, ...]]:
    yield from ((item,) for item in items)
    yield from combinations(items, 2)


def learned_on(session: Session, platform_id: int) -> Learned:
    """`learn` over every trial of every study on the platform."""
    statement = (select(TrialRow.params, TrialRow.status)
                 .join(StudyRow, TrialRow.study_id == StudyRow.id)
                 .where(StudyRow.platform_id == platform_id))
    return learn((params, Status(status)) for params, status in session.execute(statement))


def refresh(session: Session, platform: PlatformRow) -> None:
    """Recompute the platform's rules from its trials: learned rules are added or their
    evidence updated, learned rules the trials no longer support are deleted, imported
    and merged ones keep the larger evidence unless a local trial holding them compiled."""
    learned = learned_on(session, platform.id)
    now = utcnow()
    stored = {row.rule_key: row for row in session.scalars(
        select(FailureRuleRow).where(FailureRuleRow.platform_id == platform.id))}
    for key, row in stored.items():
        local = learned.rules.get(key)
        if learned.contradicts(row.knobs) or (row.source == "search" and local is None):
            session.delete(row)
        elif local is not None and (local[1] > row.failures or
                                    (row.source == "search" and local[1] != row.failures)):
            row.failures, row.updated_at = local[1], now
    for key, (knobs, failures) in learned.rules.items():
        if key not in stored:
            session.execute(insert(session, FailureRuleRow).values(
                platform_id=platform.id, rule_key=key, knobs=knobs, failures=failures,
                source="search", origin="", created_at=now, updated_at=now,
            ).on_conflict_do_nothing(index_elements=[FailureRuleRow.platform_id, FailureRuleRow.rule_key]))


def apply_rules(session: Session, rules: Iterable[FailureRule], *, source: str, origin: str) -> int:
    """Union imported or merged rules into the database (platforms stored first): a new rule
    is added, a stored one takes the larger evidence, and a rule that a local trial holding
    it contradicts (it compiled here) is left out. Returns how many were added or strengthened."""
    now, changed = utcnow(), 0
    platforms: dict[str, tuple[int, Learned]] = {}
    for rule in rules:
        if rule.platform_key not in platforms:
            platform_id = session.scalar(select(PlatformRow.id).where(PlatformRow.key == rule.platform_key))
            platforms[rule.platform_key] = (platform_id, learned_on(session, platform_id))
        platform_id, learned = platforms[rule.platform_key]
        if learned.contradicts(dict(rule.knobs)):
            continue
        statement = insert(session, FailureRuleRow).values(
            platform_id=platform_id, rule_key=rule.key, knobs=dict(rule.knobs), failures=rule.failures,
            source=source, origin=origin[:512], created_at=now, updated_at=now)
        statement = statement.on_conflict_do_update(
            index_elements=[FailureRuleRow.platform_id, FailureRuleRow.rule_key],
            set_={"failures": statement.excluded.failures, "updated_at": statement.excluded.updated_at},
            where=statement.excluded.failures > FailureRuleRow.failures,
        ).returning(FailureRuleRow.id)
        changed += session.execute(statement).first() is not None
    return changed


def rules_of(session: Session, platform_keys: list[str] | None = None) -> tuple[FailureRule, ...]:
    """The stored rules on these platforms (None: all), by platform then age."""
    statement = (select(FailureRuleRow, PlatformRow.key).join(PlatformRow)
                 .order_by(PlatformRow.id, FailureRuleRow.id))
    if platform_keys is not None:
        statement = statement.where(PlatformRow.key.in_(platform_keys))
    return tuple(FailureRule(platform_key=key, knobs=tuple(sorted(row.knobs.items())), failures=row.failures,
                             source=row.source, origin=row.origin, created_at=row.created_at)
                 for row, key in session.execute(statement))


def with_rules(session: Session, snapshot: Snapshot, *, workload_keys: list[str] | None,
               platform_keys: list[str] | None) -> Snapshot:
    """`snapshot` with the failure rules of the selection: the platforms named, else those
    of the selected best configs when workloads are named, else every platform; the
    platforms of the rules join the snapshot's."""
    if platform_keys is None and workload_keys is not None:
        platform_keys = [p.key for p in snapshot.platforms]
    rules = rules_of(session, platform_keys)
    have = {p.key for p in snapshot.platforms}
    wanted = sorted({r.platform_key for r in rules} - have)
    extra = session.scalars(select(PlatformRow).where(PlatformRow.key.in_(wanted)).order_by(PlatformRow.id))
    return replace(snapshot, rules=rules,
                   platforms=snapshot.platforms + tuple(to_platform(row) for row in extra))
