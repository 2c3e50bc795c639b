"""Early warning's stored marks (issue 46): each node's current trend verdict per figure,
fitted once after the sweep that probed it (store/trend_marks.py), so `screener nodes` and
the exporter read a few rows instead of fitting every node's sweeps (15 s at 10,000 nodes).
Empty after the upgrade: the next sweep (or `screener trend --refresh`) fills it.

Revision ID: 0009t
Revises: 0008d
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009t"
down_revision: str | None = "0008d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)
STATUSES = "\"status\" IN ('DECLINING', 'STEADY', 'BELOW', 'TOO_FEW')"
SCALES = "\"scale\" IN ('falling', 'rising', 'share', 'counter')"


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "trend_marks",
        sa.Column("node_id", ID, nullable=False),
        sa.Column("figure", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("scale", sa.String(length=16), nullable=False),
        sa.Column("sweeps", sa.Integer(), nullable=False),
        sa.Column("level", sa.Double(), nullable=True),
        sa.Column("per_sweep", sa.Double(), nullable=True),
        sa.Column("sweeps_to_cross", sa.Double(), nullable=True),
        sa.Column("days_to_cross", sa.Double(), nullable=True),
        sa.Column("crosses_at", TS, nullable=True),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("recipe", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("fitted_at", TS, nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.CheckConstraint(STATUSES, name=op.f("ck_trend_marks_status")),
        sa.CheckConstraint(SCALES, name=op.f("ck_trend_marks_scale")),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_trend_marks_node_id_nodes")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_trend_marks_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("node_id", "figure", name=op.f("pk_trend_marks")),
    )
    op.create_index(op.f("ix_trend_marks_status"), "trend_marks", ["status"], unique=False)


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index(op.f("ix_trend_marks_status"), table_name="trend_marks")
    op.drop_table("trend_marks")
