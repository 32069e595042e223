"""best configs record whether their search ran with --unsafe

Revision ID: 0007_unsafe_rows
Revises: 0006_objectives
Create Date: 2026-12-02

- best_configs and best_history .unsafe: the search that measured the row ran with `--unsafe`
  (knobs that change numerics or make unchecked assumptions were in its space), so lookup applies
  the row only where the compile call opts in (`options={"unsafe": True}`,
  `tuner.compile(..., unsafe=True)`). Existing rows get true where their params (or
  unfrozen_params) set a knob that is unsafe in tuner's tables (`UNSAFE_KNOBS` below, restated
  from search_spaces/cpu.py and cuda.py as they stood at this revision), false elsewhere.

Existing rows keep their measurement keys: tuner.storage.provenance.measurement_key adds
`unsafe` only when it is true and the knobs do not imply it, and here it becomes true only where
they do.

Self-contained: never import tuner's live models here; restate the columns.
"""
from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0007_unsafe_rows"
down_revision = "0006_objectives"
branch_labels = None
depends_on = None

UNSAFE_KNOBS = ("cpp.simdlen", "cpp.enable_unsafe_math_opt_flag", "cpp.enable_floating_point_contract_flag",
                "cpp.use_decompose_tanh", "use_fast_math", "triton.codegen_upcast_to_fp32", "assume_32bit_indexing")
TABLES = ("best_configs", "best_history")


def _holds_unsafe(value: object) -> bool:
    if isinstance(value, str):           # some drivers hand JSON columns back as text
        try:
            value = json.loads(value)
        except ValueError:
            return False
    return isinstance(value, dict) and any(name in value for name in UNSAFE_KNOBS)


def upgrade() -> None:
    for name in TABLES:
        with op.batch_alter_table(name) as batch:
            batch.add_column(sa.Column("unsafe", sa.Boolean(), nullable=False, server_default=sa.false()))
    connection = op.get_bind()
    for name in TABLES:
        table = sa.table(name, sa.column("id", sa.Integer()), sa.column("params", sa.JSON()),
                         sa.column("unfrozen_params", sa.JSON()), sa.column("unsafe", sa.Boolean()))
        rows = connection.execute(sa.select(table.c.id, table.c.params, table.c.unfrozen_params)).all()
        flagged = [row.id for row in rows if _holds_unsafe(row.params) or _holds_unsafe(row.unfrozen_params)]
        if flagged:
            connection.execute(table.update().where(table.c.id.in_(flagged)).values(unsafe=True))


def downgrade() -> None:
    for name in TABLES:
        with op.batch_alter_table(name) as batch:
            batch.drop_column("unsafe")
