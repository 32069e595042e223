"""Alembic environment for tuner's schema.

Run by `tuner.storage.migrate`, which passes an open connection in
`config.attributes["connection"]`; no alembic.ini is needed. For developers running the
alembic CLI, a `sqlalchemy.url` main option works too. The version table is
`tuner_alembic_version`; SQLite runs in batch mode (`render_as_batch`).
"""
from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy.engine import Connection

from tuner.storage.engine import WRITE, make_engine
from tuner.storage.models import Base, UTCDateTime
from tuner.storage.schema import VERSION_TABLE

config = context.config


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    """Autogenerate writes plain SQLAlchemy types, so migrations never import tuner's models."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def configure(connection: Connection | None = None, url: str | None = None) -> None:
    dialect = connection.dialect.name if connection is not None else (url or "").split(":")[0]
    context.configure(
        connection=connection,
        url=url,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        render_as_batch=dialect.startswith("sqlite"),
        compare_type=True,
        render_item=render_item,
        literal_binds=connection is None,
    )


def run_offline() -> None:
    """Emit SQL instead of running it (alembic --sql)."""
    configure(url=config.get_main_option("sqlalchemy.url"))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "", foreign_keys=False)
    try:
        with engine.connect() as owned:
            configure(owned.execution_options(**WRITE))
            with context.begin_transaction():
                context.run_migrations()
            owned.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
