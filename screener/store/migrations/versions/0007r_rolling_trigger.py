"""The rolling sweep's own trigger (issue 22): runs of `sweep --submit --rolling` (a few idle
nodes at a time, through the day) are ``rolling``, not ``sweep``, so "did last night's sweep
finish" (ScreenerSweepMissing) is not answered by a rolling job, and `screener runs` tells
them apart. Episodes a rolling job opens carry it too.

Revision ID: 0007r
Revises: 0006s
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007r"
down_revision: str | None = "0006s"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_TRIGGERS = "\"trigger\" IN ('prolog', 'sweep', 'manual', 'job')"
NEW_TRIGGERS = "\"trigger\" IN ('prolog', 'sweep', 'manual', 'job', 'rolling')"
TABLES = (("runs", "ck_runs_trigger"), ("episodes", "ck_episodes_trigger"))


def upgrade() -> None:
    """Upgrade schema."""
    for table, check in TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_constraint(op.f(check), type_="check")
            batch_op.create_check_constraint(op.f(check), NEW_TRIGGERS)


def downgrade() -> None:
    """Downgrade schema: rolling runs and episodes become the sweep's (what they were)."""
    for table, check in TABLES:
        op.execute(f"UPDATE {table} SET \"trigger\" = 'sweep' WHERE \"trigger\" = 'rolling'")
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_constraint(op.f(check), type_="check")
            batch_op.create_check_constraint(op.f(check), OLD_TRIGGERS)
