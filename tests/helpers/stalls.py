"""A database with one stored config on this machine's CPU platform, and a PostgreSQL session
that stalls other sessions' queries until released."""
from __future__ import annotations

from helpers.stored import best_for

GRAPH = "a" * 32


def seed(url: str):
    """The schema and one stored config for GRAPH on this machine's CPU platform."""
    from tuner.platform import current_platform
    from tuner.storage import Store, upgrade

    platform = current_platform("cpu")
    upgrade(url)
    with Store.open(url) as store:
        store.ensure_platform(platform)
        store.save_best(best_for(GRAPH, platform.key, {"max_fusion_size": 8}))
    return platform


class Holder:
    """Another session that stalls the lookup's queries until `release`."""

    def __init__(self, url: str, statements: list[str]) -> None:
        import psycopg2

        self.connection = psycopg2.connect(url, connect_timeout=10)   # one open transaction
        with self.connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def release(self) -> None:
        self.connection.rollback()
        self.connection.close()

