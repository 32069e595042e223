"""paired trial measurements; eager verdicts and the config without freezing

Revision ID: 0004_paired_trials
Revises: 0003_kernel_configs
Create Date: 2026-05-14

- trials.threads: torch's thread count in the trial process while it timed.
- trials.baseline_ms / .speedup / .speedup_low / .speedup_high: each trial is timed against
  Inductor's defaults in the same process, interleaved; the defaults' median, the median of
  the per-round ratios and its interval. NULL for trials measured before.
- best_configs and best_history .eager: the verdict is "run this graph uncompiled"
  (false for existing rows); .unfrozen_params / .unfrozen_speedup: beside a winner that
  turns freezing on, the config without freezing that `backend="tuner"` applies, and its
  speedup; .unfrozen_eager: running uncompiled beat every config without freezing, so the
  plain backend runs the graph eagerly; .search_speedup: the winner's paired speedup during the search. NULL for
  existing rows.

Existing rows keep their measurement keys: tuner.storage.provenance.measurement_key adds
the new fields only when they are set (eager true, the others not NULL).

Self-contained: never import tuner's live models here; restate the columns.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_paired_trials"
down_revision = "0003_kernel_configs"
branch_labels = None
depends_on = None

TRIAL_COLUMNS = ("threads", "baseline_ms", "speedup", "speedup_low", "speedup_high")
BEST_COLUMNS = ("eager", "unfrozen_params", "unfrozen_speedup", "unfrozen_eager", "search_speedup")


def _trial_columns() -> list[sa.Column]:
    return [sa.Column("threads", sa.Integer(), nullable=True),
            *(sa.Column(name, sa.Float(), nullable=True) for name in TRIAL_COLUMNS[1:])]


def _best_columns() -> list[sa.Column]:
    return [sa.Column("eager", sa.Boolean(), nullable=False, server_default=sa.false()),
            sa.Column("unfrozen_params", sa.JSON(), nullable=True),
            sa.Column("unfrozen_speedup", sa.Float(), nullable=True),
            sa.Column("unfrozen_eager", sa.Boolean(), nullable=False, server_default=sa.false()),
            sa.Column("search_speedup", sa.Float(), nullable=True)]


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for column in _trial_columns():
            batch.add_column(column)
    for table in ("best_configs", "best_history"):
        with op.batch_alter_table(table) as batch:
            for column in _best_columns():
                batch.add_column(column)


def downgrade() -> None:
    for table in ("best_history", "best_configs"):
        with op.batch_alter_table(table) as batch:
            for name in reversed(BEST_COLUMNS):
                batch.drop_column(name)
    with op.batch_alter_table("trials") as batch:
        for name in reversed(TRIAL_COLUMNS):
            batch.drop_column(name)
