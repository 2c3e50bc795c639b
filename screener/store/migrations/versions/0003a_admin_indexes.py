"""Admin queries at fleet scale: the "latest verdict per node" probe orders by
(started_at DESC, run_id DESC); with run_id in the index it is one backward index step per
node instead of an index scan plus a sort (bench/fleet_scale.py, docs/performance.md).
The new index also serves every range scan the old (node_id, started_at) one did.

On a large PostgreSQL database this builds an index over every verdict row (about 10 s per
million rows here) while holding a lock that blocks writes: run it in a quiet hour.

Revision ID: 0003a
Revises: 0003j
Create Date: 2026-11-22
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003a"
down_revision: str | None = "0003j"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_index(
        "ix_verdicts_node_id_started_at_run_id",
        "verdicts",
        ["node_id", "started_at", "run_id"],
    )
    op.drop_index("ix_verdicts_node_id_started_at", table_name="verdicts")


def downgrade() -> None:
    """Downgrade schema."""
    op.create_index("ix_verdicts_node_id_started_at", "verdicts", ["node_id", "started_at"])
    op.drop_index("ix_verdicts_node_id_started_at_run_id", table_name="verdicts")
