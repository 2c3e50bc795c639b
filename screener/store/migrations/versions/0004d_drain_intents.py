"""Two-phase drains (issue 11): a ``drain_pending`` event is written before ``scontrol``
drains a node and a ``drain`` event after, so a run killed between the two leaves an intent
that the next run finishes (``drain`` if Slurm shows exactly that reason, else
``drain_abandoned``). Only the allowed event actions change.

Revision ID: 0004d
Revises: 0003a
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004d"
down_revision: str | None = "0003a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_ACTIONS = "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip')"
NEW_ACTIONS = (
    "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip', "
    "'drain_pending', 'drain_abandoned')"
)


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), NEW_ACTIONS)


def downgrade() -> None:
    """Downgrade schema."""
    op.execute("DELETE FROM node_events WHERE action IN ('drain_pending', 'drain_abandoned')")
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), OLD_ACTIONS)
