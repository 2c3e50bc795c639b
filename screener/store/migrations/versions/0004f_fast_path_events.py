"""Fast-path events (issue 12's accuracy): the prolog records, per node it let join a job
unprobed because it passed within ``prolog.fresh_s``, a ``fast_path`` event carrying the job
id, so `screener accuracy` counts those nodes as screened OK instead of "unscreened".
Adds ``node_events.job_id`` (the job an event was for) and the new action.

Revision ID: 0004f
Revises: 0004d
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004f"
down_revision: str | None = "0004d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_ACTIONS = (
    "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip', "
    "'drain_pending', 'drain_abandoned')"
)
NEW_ACTIONS = (
    "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip', "
    "'drain_pending', 'drain_abandoned', 'fast_path')"
)


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.add_column(sa.Column("job_id", sa.String(length=64), nullable=True))
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), NEW_ACTIONS)


def downgrade() -> None:
    """Downgrade schema."""
    op.execute("DELETE FROM node_events WHERE action = 'fast_path'")
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), OLD_ACTIONS)
        batch_op.drop_column("job_id")
