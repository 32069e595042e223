"""initial schema: platforms, workloads, graphs, studies, trials, best_configs

Revision ID: 0001_initial
Revises:
Create Date: 2026-05-09

Self-contained: never import tuner's live models here; restate the tables and columns.
Constraint names follow the naming convention of tuner.storage.models.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer(), primary_key=True)


def _upgrade_keys() -> None:
    op.create_table(
        "platforms", _id(),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("hardware_key", sa.String(128), nullable=False),
        sa.Column("software_key", sa.String(128), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("hardware", sa.JSON(), nullable=False),
        sa.Column("software", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_platforms"),
        sa.UniqueConstraint("key", name="uq_platforms_key"),
    )
    op.create_index("ix_platforms_hardware_key", "platforms", ["hardware_key"])
    op.create_table(
        "workloads", _id(),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workloads"),
        sa.UniqueConstraint("key", name="uq_workloads_key"),
    )
    op.create_table(
        "graphs", _id(),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("num_nodes", sa.Integer(), nullable=False),
        sa.Column("input_meta", sa.Text(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_graphs"),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], ondelete="CASCADE",
                                name="fk_graphs_workload_id_workloads"),
        sa.UniqueConstraint("workload_id", "index", name="uq_graphs_workload_id_index"),
    )
    op.create_index("ix_graphs_key", "graphs", ["key"])


def _upgrade_studies() -> None:
    op.create_table(
        "studies", _id(),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("space_hash", sa.String(128), nullable=False),
        sa.Column("sampler", sa.String(64), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("trials_requested", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("tuner_version", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_studies"),
        sa.ForeignKeyConstraint(["workload_id"], ["workloads.id"], ondelete="CASCADE",
                                name="fk_studies_workload_id_workloads"),
        sa.ForeignKeyConstraint(["platform_id"], ["platforms.id"], ondelete="CASCADE",
                                name="fk_studies_platform_id_platforms"),
    )
    op.create_index("ix_studies_workload_id_platform_id", "studies",
                    ["workload_id", "platform_id"])
    op.create_table(
        "trials", _id(),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("candidate_key", sa.String(128), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("spread_ms", sa.Float(), nullable=True),
        sa.Column("compile_s", sa.Float(), nullable=True),
        sa.Column("peak_mem_mb", sa.Float(), nullable=True),
        sa.Column("reps", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("started_at", UTC, nullable=True),
        sa.Column("finished_at", UTC, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="CASCADE",
                                name="fk_trials_study_id_studies"),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_id_number"),
        sa.UniqueConstraint("study_id", "candidate_key", name="uq_trials_study_id_candidate_key"),
    )


def _upgrade_best() -> None:
    op.create_table(
        "best_configs", _id(),
        sa.Column("graph_key", sa.String(128), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("speedup", sa.Float(), nullable=False),
        sa.Column("ci_low", sa.Float(), nullable=False),
        sa.Column("ci_high", sa.Float(), nullable=False),
        sa.Column("rounds", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("baseline_ms", sa.Float(), nullable=True),
        sa.Column("workload_key", sa.String(128), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=True),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("tuner_version", sa.String(64), nullable=False),
        sa.Column("torch_version", sa.String(128), nullable=False),
        sa.Column("triton_version", sa.String(128), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_best_configs"),
        sa.ForeignKeyConstraint(["platform_id"], ["platforms.id"], ondelete="CASCADE",
                                name="fk_best_configs_platform_id_platforms"),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"], ondelete="SET NULL",
                                name="fk_best_configs_study_id_studies"),
        sa.UniqueConstraint("graph_key", "platform_id",
                            name="uq_best_configs_graph_key_platform_id"),
    )
    op.create_index("ix_best_configs_platform_id", "best_configs", ["platform_id"])


def upgrade() -> None:
    _upgrade_keys()
    _upgrade_studies()
    _upgrade_best()


def downgrade() -> None:
    op.drop_table("best_configs")
    op.drop_table("trials")
    op.drop_table("studies")
    op.drop_table("graphs")
    op.drop_table("workloads")
    op.drop_table("platforms")
