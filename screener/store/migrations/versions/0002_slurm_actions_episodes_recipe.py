"""Slurm integration and honest history: slow episodes, the actions screener takes in Slurm
(drain, resume, refusals, guard trips), the mass-drain guard's reason per run, a probe-recipe
fingerprint on probes and verdicts (history compares like with like), the ``job`` trigger,
and no more never-used "aborted" run status.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)

OLD_TRIGGERS = "\"trigger\" IN ('prolog', 'sweep', 'manual')"
NEW_TRIGGERS = "\"trigger\" IN ('prolog', 'sweep', 'manual', 'job')"
OLD_STATUSES = "\"status\" IN ('running', 'done', 'failed', 'aborted')"
NEW_STATUSES = "\"status\" IN ('running', 'done', 'failed')"
OLD_ACTIONS = "\"action\" IN ('drain', 'resume', 'flaky_episode_start', 'flaky_episode_end')"
NEW_ACTIONS = "\"action\" IN ('drain', 'resume', 'drain_failed', 'resume_refused', 'guard_trip')"


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "episodes",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_id", ID, nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("ended_at", TS, nullable=True),
        sa.Column("start_run_id", ID, nullable=True),
        sa.Column("end_run_id", ID, nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.CheckConstraint(NEW_TRIGGERS, name=op.f("ck_episodes_trigger")),
        sa.ForeignKeyConstraint(
            ["end_run_id"],
            ["runs.id"],
            name=op.f("fk_episodes_end_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_episodes_node_id_nodes")),
        sa.ForeignKeyConstraint(
            ["start_run_id"],
            ["runs.id"],
            name=op.f("fk_episodes_start_run_id_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_episodes")),
    )
    op.create_index(
        op.f("ix_episodes_node_id_started_at"), "episodes", ["node_id", "started_at"], unique=False
    )
    op.create_index(op.f("ix_episodes_started_at"), "episodes", ["started_at"], unique=False)
    with op.batch_alter_table("node_probes") as batch_op:
        batch_op.add_column(sa.Column("recipe", sa.String(length=32), nullable=True))
    with op.batch_alter_table("verdicts") as batch_op:
        batch_op.add_column(sa.Column("recipe", sa.String(length=32), nullable=True))
    op.execute("UPDATE runs SET status = 'failed' WHERE status = 'aborted'")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("guard_reason", sa.Text(), nullable=True))
        batch_op.drop_constraint(op.f("ck_runs_trigger"), type_="check")
        batch_op.create_check_constraint(op.f("ck_runs_trigger"), NEW_TRIGGERS)
        batch_op.drop_constraint(op.f("ck_runs_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_runs_status"), NEW_STATUSES)
    op.execute("DELETE FROM node_events WHERE action LIKE 'flaky_episode_%'")
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), NEW_ACTIONS)


def downgrade() -> None:
    """Downgrade schema."""
    op.execute(
        "DELETE FROM node_events WHERE action IN ('drain_failed', 'resume_refused', 'guard_trip')"
    )
    with op.batch_alter_table("node_events") as batch_op:
        batch_op.drop_constraint(op.f("ck_node_events_action"), type_="check")
        batch_op.create_check_constraint(op.f("ck_node_events_action"), OLD_ACTIONS)
    op.execute("DELETE FROM runs WHERE \"trigger\" = 'job'")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_constraint(op.f("ck_runs_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_runs_status"), OLD_STATUSES)
        batch_op.drop_constraint(op.f("ck_runs_trigger"), type_="check")
        batch_op.create_check_constraint(op.f("ck_runs_trigger"), OLD_TRIGGERS)
        batch_op.drop_column("guard_reason")
    with op.batch_alter_table("verdicts") as batch_op:
        batch_op.drop_column("recipe")
    with op.batch_alter_table("node_probes") as batch_op:
        batch_op.drop_column("recipe")
    op.drop_index(op.f("ix_episodes_started_at"), table_name="episodes")
    op.drop_index(op.f("ix_episodes_node_id_started_at"), table_name="episodes")
    op.drop_table("episodes")
