"""After the job: ingested IOR/fio results per job, node, phase and iteration (issue 12).

Revision ID: 0003j
Revises: 0003v
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003j"
down_revision: str | None = "0003v"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "job_ingests",
        sa.Column("id", ID, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("partition", sa.String(length=64), nullable=True),
        sa.Column("nodeset", sa.Text(), nullable=False),
        sa.Column("layout", sa.Text(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.Column("observed_at", TS, nullable=False),
        sa.Column("ingested_at", TS, nullable=False),
        sa.Column("screener_version", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_ingests")),
    )
    op.create_index(op.f("ix_job_ingests_job_id"), "job_ingests", ["job_id"], unique=False)
    op.create_index(
        op.f("ix_job_ingests_observed_at"), "job_ingests", ["observed_at"], unique=False
    )
    op.create_table(
        "job_results",
        sa.Column("id", ID, nullable=False),
        sa.Column("ingest_id", ID, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("node_id", ID, nullable=True),
        sa.Column("phase", sa.String(length=8), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("ranks", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("throughput_bytes_s", sa.Double(), nullable=False),
        sa.Column("ratio", sa.Double(), nullable=True),
        sa.Column("z", sa.Double(), nullable=True),
        sa.Column("outlier", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("ingested_at", TS, nullable=False),
        sa.CheckConstraint("\"phase\" IN ('write', 'read')", name=op.f("ck_job_results_phase")),
        sa.CheckConstraint(
            "\"source\" IN ('ior_text', 'ior_json', 'ior_csv', 'fio_json')",
            name=op.f("ck_job_results_source"),
        ),
        sa.CheckConstraint("iteration >= 0", name=op.f("ck_job_results_iteration")),
        sa.ForeignKeyConstraint(
            ["ingest_id"],
            ["job_ingests.id"],
            name=op.f("fk_job_results_ingest_id_job_ingests"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_job_results_node_id_nodes")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_results")),
    )
    op.create_index(op.f("ix_job_results_ingest_id"), "job_results", ["ingest_id"], unique=False)
    op.create_index(op.f("ix_job_results_job_id"), "job_results", ["job_id"], unique=False)
    op.create_index(
        op.f("ix_job_results_node_id_ingested_at"),
        "job_results",
        ["node_id", "ingested_at"],
        unique=False,
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index(op.f("ix_job_results_node_id_ingested_at"), table_name="job_results")
    op.drop_index(op.f("ix_job_results_job_id"), table_name="job_results")
    op.drop_index(op.f("ix_job_results_ingest_id"), table_name="job_results")
    op.drop_table("job_results")
    op.drop_index(op.f("ix_job_ingests_observed_at"), table_name="job_ingests")
    op.drop_index(op.f("ix_job_ingests_job_id"), table_name="job_ingests")
    op.drop_table("job_ingests")
