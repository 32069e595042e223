"""team sharing: best-config history, where a best config came from, versions on studies

Revision ID: 0002_sharing
Revises: 0001_initial
Create Date: 2026-05-10

- best_history: every save attempt of a best config (search, import, merge), kept or not,
  one row per distinct measurement (`measurement_key`, so a re-import adds nothing);
  seeded with one row per existing best config.
- best_configs.source / .origin: "search", "import" (origin: the file name) or "merge"
  (origin: the source database URL without its password).
- studies.torch_version / .triton_version: the versions a study's trials were measured
  under; filled from each study's platform for existing rows.

Self-contained: never import tuner's live models here; restate the tables and columns.
`_measurement_key` restates tuner.storage.provenance.measurement_key: keep them equal.
"""
from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002_sharing"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)

_KEY_FIELDS = ("graph_key", "platform_key", "workload_key", "params", "is_default", "speedup",
               "ci_low", "ci_high", "rounds", "latency_ms", "baseline_ms", "user", "host",
               "tuner_version", "torch_version", "triton_version", "created_at")


def _aware(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _measurement_key(row: dict[str, Any]) -> str:
    data = {name: row[name] for name in _KEY_FIELDS}
    for name in ("speedup", "ci_low", "ci_high", "latency_ms", "baseline_ms"):
        data[name] = None if data[name] is None else float(data[name])
    data["rounds"], data["is_default"] = int(data["rounds"]), bool(data["is_default"])
    data["created_at"] = _aware(row["created_at"]).isoformat()
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _create_history() -> None:
    op.create_table(
        "best_history",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("measurement_key", sa.String(64), nullable=False),
        sa.Column("graph_key", sa.String(128), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("workload_key", sa.String(128), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.Column("ci_low", sa.Float(), nullable=False),
        sa.Column("ci_high", sa.Float(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("baseline_ms", sa.Float(), nullable=True),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("tuner_version", sa.String(64), nullable=False),
        sa.Column("torch_version", sa.String(128), nullable=False),
        sa.Column("triton_version", sa.String(128), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("recorded_at", UTC, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("origin", sa.String(512), nullable=False),
        sa.Column("kept", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_best_history"),
        sa.ForeignKeyConstraint(["platform_id"], ["platforms.id"], ondelete="CASCADE",
                                name="fk_best_history_platform_id_platforms"),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="SET NULL",
                                name="fk_best_history_study_id_studies"),
        sa.UniqueConstraint("measurement_key", name="uq_best_history_measurement_key"),
    )
    op.create_index("ix_best_history_graph_key_platform_id", "best_history",
                    ["graph_key", "platform_id"])


def _seed_history() -> None:
    """One history row per existing best config: the measurements kept so far."""
    bind = op.get_bind()
    meta = sa.MetaData()
    best = sa.Table("best_configs", meta, autoload_with=bind)
    platforms = sa.Table("platforms", meta, autoload_with=bind)
    history = sa.Table("best_history", meta, autoload_with=bind)
    rows = bind.execute(sa.select(best, platforms.c.key.label("platform_key"))
                        .join(platforms, best.c.platform_id == platforms.c.id)
                        .order_by(best.c.id)).mappings().all()
    for row in rows:
        values = {name: row[name] for name in (
            "graph_key", "platform_id", "workload_key", "is_default", "speedup", "ci_low",
            "ci_high", "rounds", "latency_ms", "baseline_ms", "study_id", "user", "host",
            "tuner_version", "torch_version", "triton_version")}
        params = _json(row["params"])
        created = _aware(row["created_at"])
        key = _measurement_key({**dict(row), "params": params, "created_at": created})
        bind.execute(history.insert().values(
            **values, params=params, created_at=created, recorded_at=created,
            measurement_key=key, source="search", origin="", kept=True))


def _fill_study_versions() -> None:
    bind = op.get_bind()
    meta = sa.MetaData()
    studies = sa.Table("studies", meta, autoload_with=bind)
    platforms = sa.Table("platforms", meta, autoload_with=bind)
    for platform_id, software in bind.execute(sa.select(platforms.c.id, platforms.c.software)):
        software = _json(software) or {}
        bind.execute(studies.update().where(studies.c.platform_id == platform_id).values(
            torch_version=str(software.get("torch", ""))[:128],
            triton_version=str(software.get("triton", ""))[:128]))


def upgrade() -> None:
    with op.batch_alter_table("best_configs") as batch:
        batch.add_column(sa.Column("source", sa.String(16), nullable=False,
                                   server_default="search"))
        batch.add_column(sa.Column("origin", sa.String(512), nullable=False, server_default=""))
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("torch_version", sa.String(128), nullable=False,
                                   server_default=""))
        batch.add_column(sa.Column("triton_version", sa.String(128), nullable=False,
                                   server_default=""))
    _create_history()
    _seed_history()
    _fill_study_versions()


def downgrade() -> None:
    op.drop_index("ix_best_history_graph_key_platform_id", table_name="best_history")
    op.drop_table("best_history")
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("triton_version")
        batch.drop_column("torch_version")
    with op.batch_alter_table("best_configs") as batch:
        batch.drop_column("origin")
        batch.drop_column("source")
