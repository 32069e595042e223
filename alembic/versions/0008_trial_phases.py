"""trials record where their time went and whether their compile was a cache hit

Revision ID: 0008_trial_phases
Revises: 0007_unsafe_rows
Create Date: 2026-12-04

- trials.start_s: from the job handed over to the trial code's start (process start and imports;
  about nothing for a spare process that had imported already, workers/spares.py)
- trials.load_s: before timing, but for the compiles (model loads, eager references)
- trials.baseline_compile_s: the compile of the defaults the trial is paired with
- trials.measure_s: the timed section
- trials.compile_cached: the candidate's compile was served by Inductor's FX graph cache

All nullable: existing trials get NULL (not measured).

Self-contained: never import tuner's live models here; restate the columns.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_trial_phases"
down_revision = "0007_unsafe_rows"
branch_labels = None
depends_on = None

SECONDS = ("start_s", "load_s", "baseline_compile_s", "measure_s")


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in SECONDS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))
        batch.add_column(sa.Column("compile_cached", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in (*SECONDS, "compile_cached"):
            batch.drop_column(name)
