"""Dry-run sweep events (issue 25): a sweep run with --dry-run drains and resumes nobody but
records what it would have done, as ``would_drain`` (with the exact reason) and
``would_resume`` node events of its run.

Revision ID: 0005s
Revises: 0004f
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005s"
down_revision: str | None = "0004f"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_ACTIONS = (
    "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip', "
    "'drain_pending', 'drain_abandoned', 'fast_path')"
)
NEW_ACTIONS = (
    "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip', "
    "'drain_pending', 'drain_abandoned', 'fast_path', 'would_drain', 'would_resume')"
)


def upgrade() -> None:
    """Upgrade schema."""
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), NEW_ACTIONS)


def downgrade() -> None:
    """Downgrade schema."""
    op.execute("DELETE FROM node_events WHERE action IN ('would_drain', 'would_resume')")
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), OLD_ACTIONS)
