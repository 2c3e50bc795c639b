"""Initial schema: nodes, runs, per-round node probes with fio jobs, iostat samples and
facts, verdicts, and node events (see screener/store/tables.py for the why of the layout).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite autoincrements INTEGER only
TS = sa.DateTime(timezone=True)  # stored as UTC; naive UTC on SQLite


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "nodes",
        sa.Column("id", ID, nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
        sa.UniqueConstraint("name", name=op.f("uq_nodes_name")),
    )
    op.create_table(
        "runs",
        sa.Column("id", ID, nullable=False),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("nodeset", sa.Text(), nullable=False),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("policy", sa.JSON(), nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("shared_cause", sa.Boolean(), nullable=False),
        sa.Column("shared_cause_reason", sa.Text(), nullable=False),
        sa.Column("peer_read_median_mb_s", sa.Double(), nullable=True),
        sa.Column("peer_rand_median_iops", sa.Double(), nullable=True),
        sa.Column("screener_version", sa.String(length=32), nullable=False),
        sa.CheckConstraint(
            "\"status\" IN ('running', 'done', 'failed', 'aborted')", name=op.f("ck_runs_status")
        ),
        sa.CheckConstraint(
            "\"trigger\" IN ('prolog', 'sweep', 'manual')", name=op.f("ck_runs_trigger")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_started_at"), "runs", ["started_at"], unique=False)
    op.create_table(
        "node_events",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_id", ID, nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("run_id", ID, nullable=True),
        sa.Column("slurm_reason", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "\"action\" IN ('drain', 'resume', 'flaky_episode_start', 'flaky_episode_end')",
            name=op.f("ck_node_events_action"),
        ),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_node_events_node_id_nodes")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_node_events_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_events")),
    )
    op.create_index(
        op.f("ix_node_events_node_id_at"), "node_events", ["node_id", "at"], unique=False
    )
    op.create_table(
        "node_probes",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("node_id", ID, nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("fio_version", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_kind", sa.String(length=32), nullable=True),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("raw_fio", sa.Text(), nullable=False),
        sa.Column("raw_iostat", sa.Text(), nullable=False),
        sa.CheckConstraint("round >= 1", name=op.f("ck_node_probes_round")),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name=op.f("fk_node_probes_node_id_nodes")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_node_probes_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_probes")),
        sa.UniqueConstraint(
            "run_id", "node_id", "round", name=op.f("uq_node_probes_run_id_node_id_round")
        ),
    )
    op.create_index(
        op.f("ix_node_probes_node_id_run_id"), "node_probes", ["node_id", "run_id"], unique=False
    )
    op.create_table(
        "verdicts",
        sa.Column("id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("node_id", ID, nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("read_mb_s", sa.Double(), nullable=True),
        sa.Column("write_mb_s", sa.Double(), nullable=True),
        sa.Column("rand_read_iops", sa.Double(), nullable=True),
        sa.Column("ratio", sa.Double(), nullable=True),
        sa.Column("read_p99_ms", sa.Double(), nullable=True),
        sa.Column("z_read", sa.Double(), nullable=True),
        sa.Column("z_rand", sa.Double(), nullable=True),
        sa.Column("confirmed", sa.Boolean(), nullable=False),
        sa.Column("signals", sa.JSON(), nullable=False),
        sa.CheckConstraint(
            "\"status\" IN ('OK', 'SLOW_READ', 'SLOW_WRITE', 'DEGRADED', 'UNKNOWN')",
            name=op.f("ck_verdicts_status"),
        ),
        sa.ForeignKeyConstraint(["node_id"], ["nodes.id"], name=op.f("fk_verdicts_node_id_nodes")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_verdicts_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verdicts")),
        sa.UniqueConstraint("run_id", "node_id", name=op.f("uq_verdicts_run_id_node_id")),
    )
    op.create_index(
        op.f("ix_verdicts_node_id_started_at"), "verdicts", ["node_id", "started_at"], unique=False
    )
    op.create_index(op.f("ix_verdicts_started_at"), "verdicts", ["started_at"], unique=False)
    op.create_table(
        "iostat_samples",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_probe_id", ID, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("ts", sa.String(length=64), nullable=False),
        sa.Column("r_s", sa.Double(), nullable=False),
        sa.Column("rkb_s", sa.Double(), nullable=False),
        sa.Column("w_s", sa.Double(), nullable=False),
        sa.Column("wkb_s", sa.Double(), nullable=False),
        sa.Column("r_await_ms", sa.Double(), nullable=False),
        sa.Column("w_await_ms", sa.Double(), nullable=False),
        sa.Column("aqu_sz", sa.Double(), nullable=False),
        sa.Column("util_pct", sa.Double(), nullable=False),
        sa.CheckConstraint("device <> ''", name=op.f("ck_iostat_samples_device")),
        sa.ForeignKeyConstraint(
            ["node_probe_id"],
            ["node_probes.id"],
            name=op.f("fk_iostat_samples_node_probe_id_node_probes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_iostat_samples")),
    )
    op.create_index(
        op.f("ix_iostat_samples_node_probe_id"), "iostat_samples", ["node_probe_id"], unique=False
    )
    op.create_table(
        "node_facts",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_probe_id", ID, nullable=False),
        sa.Column("device", sa.String(length=64), nullable=True),
        sa.Column("pcie_speed", sa.String(length=32), nullable=True),
        sa.Column("pcie_max_speed", sa.String(length=32), nullable=True),
        sa.Column("pcie_width", sa.Integer(), nullable=True),
        sa.Column("pcie_max_width", sa.Integer(), nullable=True),
        sa.Column("scheduler", sa.String(length=32), nullable=True),
        sa.Column("read_ahead_kb", sa.Integer(), nullable=True),
        sa.Column("nr_requests", sa.Integer(), nullable=True),
        sa.Column("write_cache", sa.String(length=32), nullable=True),
        sa.Column("smart_critical_warning", sa.Integer(), nullable=True),
        sa.Column("smart_temperature_c", sa.Double(), nullable=True),
        sa.Column("smart_media_errors", sa.BigInteger(), nullable=True),
        sa.Column("smart_percentage_used", sa.Integer(), nullable=True),
        sa.Column("md_arrays", sa.JSON(), nullable=True),
        sa.Column("md_degraded", sa.JSON(), nullable=True),
        sa.Column("md_rebuilding", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["node_probe_id"],
            ["node_probes.id"],
            name=op.f("fk_node_facts_node_probe_id_node_probes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_facts")),
        sa.UniqueConstraint("node_probe_id", name=op.f("uq_node_facts_node_probe_id")),
    )
    op.create_table(
        "probe_jobs",
        sa.Column("id", ID, nullable=False),
        sa.Column("node_probe_id", ID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("rw", sa.String(length=16), nullable=False),
        sa.Column("bw_bytes", sa.Double(), nullable=False),
        sa.Column("iops", sa.Double(), nullable=False),
        sa.Column("total_ios", sa.BigInteger(), nullable=False),
        sa.Column("runtime_ms", sa.Double(), nullable=False),
        sa.Column("lat_mean_ns", sa.Double(), nullable=False),
        sa.Column("lat_p50_ns", sa.Double(), nullable=False),
        sa.Column("lat_p99_ns", sa.Double(), nullable=False),
        sa.Column("lat_p999_ns", sa.Double(), nullable=False),
        sa.Column("slow_fraction", sa.Double(), nullable=False),
        sa.Column("error", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "\"kind\" IN ('seq_write', 'seq_read', 'rand_read')", name=op.f("ck_probe_jobs_kind")
        ),
        sa.ForeignKeyConstraint(
            ["node_probe_id"],
            ["node_probes.id"],
            name=op.f("fk_probe_jobs_node_probe_id_node_probes"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_jobs")),
        sa.UniqueConstraint("node_probe_id", "kind", name=op.f("uq_probe_jobs_node_probe_id_kind")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("probe_jobs")
    op.drop_table("node_facts")
    op.drop_index(op.f("ix_iostat_samples_node_probe_id"), table_name="iostat_samples")
    op.drop_table("iostat_samples")
    op.drop_index(op.f("ix_verdicts_started_at"), table_name="verdicts")
    op.drop_index(op.f("ix_verdicts_node_id_started_at"), table_name="verdicts")
    op.drop_table("verdicts")
    op.drop_index(op.f("ix_node_probes_node_id_run_id"), table_name="node_probes")
    op.drop_table("node_probes")
    op.drop_index(op.f("ix_node_events_node_id_at"), table_name="node_events")
    op.drop_table("node_events")
    op.drop_index(op.f("ix_runs_started_at"), table_name="runs")
    op.drop_table("runs")
    op.drop_table("nodes")
