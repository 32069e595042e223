"""learned failures: knob values and pairs that always failed to compile on a platform

Revision ID: 0005_failure_rules
Revises: 0004_paired_trials
Create Date: 2026-05-16

- failure_rules: one row per (platform, rule). A rule is one knob=value, or a pair of them
  (`knobs`, a JSON object of one or two entries; `rule_key` hashes it), learned as failing
  when at least 2 trials holding it on that platform failed to compile and none holding it
  compiled (tuner.storage.failures). `failures` is that evidence; `source` says where the
  rule came from (search: learned from this database's trials; import; merge) and
  `origin` the file or database it came from.

Self-contained: never import tuner's live models here; restate the table.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_failure_rules"
down_revision = "0004_paired_trials"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "failure_rules",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("rule_key", sa.String(64), nullable=False),
        sa.Column("knobs", sa.JSON(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False, server_default="search"),
        sa.Column("origin", sa.String(512), nullable=False, server_default=""),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("updated_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_failure_rules"),
        sa.ForeignKeyConstraint(["platform_id"], ["platforms.id"], ondelete="CASCADE",
                                name="fk_failure_rules_platform_id_platforms"),
        sa.UniqueConstraint("platform_id", "rule_key", name="uq_failure_rules_platform_id_rule_key"),
    )


def downgrade() -> None:
    op.drop_table("failure_rules")
