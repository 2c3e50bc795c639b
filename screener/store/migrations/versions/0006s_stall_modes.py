"""Stall modes per fio job (issue 24): the queue depth fio reported, and the I/Os of a
stall mode in the completion-latency histogram with that mode's median latency
(screener/probe/stalls.py). Rows written before have no stall mode: 0.

Revision ID: 0006s
Revises: 0005s
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006s"
down_revision: str | None = "0005s"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("probe_jobs") as batch_op:
        batch_op.add_column(sa.Column("iodepth", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(
            sa.Column("stall_ios", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.add_column(sa.Column("stall_ns", sa.Double(), server_default="0", nullable=False))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("probe_jobs") as batch_op:
        batch_op.drop_column("stall_ns")
        batch_op.drop_column("stall_ios")
        batch_op.drop_column("iodepth")
