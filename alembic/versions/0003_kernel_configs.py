"""Triton kernel tile configs chosen by tuner.autotune

Revision ID: 0003_kernel_configs
Revises: 0002_sharing
Create Date: 2026-05-12

- kernel_configs: the kept tile config (block sizes, num_warps, num_stages, ...) of one
  `tuner.autotune` kernel per (kernel key, platform), with its timing, how many configs
  were tried, the versions it was measured under and who measured it.

Self-contained: never import tuner's live models here; restate the table.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_kernel_configs"
down_revision = "0002_sharing"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "kernel_configs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("kernel_key", sa.String(64), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("kernel_name", sa.String(255), nullable=False),
        sa.Column("key_args", sa.JSON(), nullable=False),
        sa.Column("dtypes", sa.String(1024), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("spread_ms", sa.Float(), nullable=False),
        sa.Column("configs_tried", sa.Integer(), nullable=False),
        sa.Column("space_size", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False, server_default="search"),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("tuner_version", sa.String(64), nullable=False),
        sa.Column("torch_version", sa.String(128), nullable=False),
        sa.Column("triton_version", sa.String(128), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_kernel_configs"),
        sa.ForeignKeyConstraint(["platform_id"], ["platforms.id"], ondelete="CASCADE",
                                name="fk_kernel_configs_platform_id_platforms"),
        sa.UniqueConstraint("kernel_key", "platform_id",
                            name="uq_kernel_configs_kernel_key_platform_id"),
    )
    op.create_index("ix_kernel_configs_platform_id", "kernel_configs", ["platform_id"])


def downgrade() -> None:
    op.drop_index("ix_kernel_configs_platform_id", table_name="kernel_configs")
    op.drop_table("kernel_configs")
