"""The dd sentinel's own readings (issue 22): the fast path's sentinel reads with dd (no
fio start cost) and judges each node against its own earlier dd figures, which the prolog
records right after the node's fio sentinel read as usual.

Revision ID: 0008d
Revises: 0007r
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008d"
down_revision: str | None = "0007r"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "sentinel_readings",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_id", ID, nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("recipe", sa.String(length=32), nullable=False),
        sa.Column("read_bw", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_sentinel_readings_node_id_nodes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sentinel_readings")),
    )
    op.create_index(
        op.f("ix_sentinel_readings_node_id_recipe_at"),
        "sentinel_readings",
        ["node_id", "recipe", "at"],
        unique=False,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index(op.f("ix_sentinel_readings_node_id_recipe_at"), table_name="sentinel_readings")
    op.drop_table("sentinel_readings")
