"""Verdicts that hold up: latency tails per verdict and a ``baseline`` flag saying the
figures may serve as the node's own history (OK, or absolved by a shared cause, so that a
fleet-wide shift is learned instead of freezing history).

Revision ID: 0003v
Revises: 0002
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003v"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("verdicts") as batch_op:
        batch_op.add_column(sa.Column("read_p999_ms", sa.Double(), nullable=True))
        batch_op.add_column(sa.Column("rand_read_p99_ms", sa.Double(), nullable=True))
        batch_op.add_column(sa.Column("baseline", sa.Boolean(), nullable=True))
    # Rows written before: an OK verdict was what history read, so it is a baseline.
    op.execute("UPDATE verdicts SET baseline = (status = 'OK')")


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("verdicts") as batch_op:
        batch_op.drop_column("baseline")
        batch_op.drop_column("rand_read_p99_ms")
        batch_op.drop_column("read_p999_ms")
