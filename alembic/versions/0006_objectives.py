"""multi-objective studies: what a study minimised and which objective picked its stored point

Revision ID: 0006_objectives
Revises: 0005_failure_rules
Create Date: 2026-05-18

- studies.objectives: the names the study minimised, comma-separated, in `--objective` order
  (tuner.search.objectives: latency, memory, compile_time); "latency" for existing rows, which is
  what every earlier study minimised.
- studies.prefer: the objective that picked the operating point confirmed and stored
  (`--prefer`); "latency" for existing rows.

Self-contained: never import tuner's live models here; restate the columns.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_objectives"
down_revision = "0005_failure_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("objectives", sa.String(128), nullable=False, server_default="latency"))
        batch.add_column(sa.Column("prefer", sa.String(64), nullable=False, server_default="latency"))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("prefer")
        batch.drop_column("objectives")
