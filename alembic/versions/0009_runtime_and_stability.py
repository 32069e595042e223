"""best configs record their runtime knobs and how stable their win is

Revision ID: 0009_runtime_and_stability
Revises: 0008_trial_phases
Create Date: 2026-12-06

- best_configs and best_history .runtime: the runtime knobs of the verdict (settings of the process
  the model runs in, tuner.runtime: e.g. {"runtime.allocator": "jemalloc"}), apart from the compile
  knobs in `params`; a JSON object, {} where none apply. Existing rows get {}.
- best_configs and best_history .stability: the share of bootstrap resamples of the confirmation's
  held-out rounds in which the stored config was the fastest or tied, in [0, 1]; NULL where not
  measured, as for every existing row.

Existing rows keep their measurement keys: tuner.storage.provenance.measurement_key adds `runtime`
only when it is not empty and `stability` only when it is not NULL.

Self-contained: never import tuner's live models here; restate the columns.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_runtime_and_stability"
down_revision = "0008_trial_phases"
branch_labels = None
depends_on = None

TABLES = ("best_configs", "best_history")


def upgrade() -> None:
    for name in TABLES:
        with op.batch_alter_table(name) as batch:
            batch.add_column(sa.Column("runtime", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
            batch.add_column(sa.Column("stability", sa.Float(), nullable=True))


def downgrade() -> None:
    for name in TABLES:
        with op.batch_alter_table(name) as batch:
            batch.drop_column("stability")
            batch.drop_column("runtime")
