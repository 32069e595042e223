"""Learned failures through a Store: knob values and pairs that always fail to compile on a platform.

The rule, its scope and how rules are recomputed, imported and merged are in
`tuner.storage.failure_rows`, which holds the statements (run in a caller's session); here
each runs in one `Store.session_scope()`, so driver errors leave as StorageError.
"""
from __future__ import annotations

from sqlalchemy import select

from tuner.storage.failure_rows import learn, refresh, rules_of
from tuner.storage.models import PlatformRow
from tuner.storage.records import FailureRule
from tuner.storage.store import Store

__all__ = ["failure_rules", "learn", "refresh_rules"]


def refresh_rules(store: Store, platform_key: str) -> tuple[FailureRule, ...]:
    """Recompute the platform's rules from its trials (see `refresh`) in one write
    transaction and return them; () when the platform is not stored."""
    with store.session_scope(write=True) as session:
        platform = session.scalars(select(PlatformRow).where(PlatformRow.key == platform_key)).first()
        if platform is None:
            return ()
        refresh(session, platform)
        session.flush()
        return rules_of(session, [platform_key])


def failure_rules(store: Store, platform_key: str | None = None) -> tuple[FailureRule, ...]:
    """The stored rules of one platform (None: every platform); empty when there are none."""
    with store.session_scope() as session:
        return rules_of(session, None if platform_key is None else [platform_key])
