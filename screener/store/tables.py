"""The database schema as SQLAlchemy 2 typed models, portable between SQLite and PostgreSQL.

Layout: a probe is split into ``node_probes`` (one row per node per round, carrying the
error, if any, and the raw outputs) and ``probe_jobs`` (one row per fio job). A node that
failed is then simply a probe with an error and no jobs, instead of a fake "error" job, and
iostat samples and facts hang off the probe they were taken with. Verdicts carry a copy of
their run's ``started_at`` so that "history of node X" and "flaky nodes since T" are range
scans of one ``(node_id, started_at)`` index. Timestamps are stored as UTC and always come
back timezone-aware.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from screener.probe_data import Status, Trigger

RUN_STATUSES = ("running", "done", "failed")
# What screener did (or refused to do) to a node in Slurm. ``slurm_reason`` carries the exact
# reason string screener set, so a later resume can check it is still screener's drain.
EVENT_ACTIONS = (
    "drain",  # screener drained the node (reason recorded)
    "resume",  # screener resumed a node it had drained
    "drain_failed",  # scontrol refused or timed out: the node was NOT drained
    "resume_refused",  # the node's current reason is not screener's: left alone
    "guard_trip",  # the mass-drain guard stopped this node's drain (shared cause)
)
# Bookkeeping of two-phase drains (0004d), not actions in Slurm (so not exporter counters):
# the intent, written before scontrol runs; a run killed after it is finished by the next
# one (hooks.drains.finish_pending) as "drain" when Slurm shows exactly the intended
# reason, else as "drain_abandoned".
INTENT_ACTIONS = ("drain_pending", "drain_abandoned")
# What the prolog decided without probing (0004f): the node passed within prolog.fresh_s, so
# it joined the job unprobed. Recorded with the job id, so `accuracy` counts it as screened OK.
SCREEN_ACTIONS = ("fast_path",)
# What a dry-run sweep would have done (0005s): a drain (its exact reason) or a resume.
DRY_RUN_ACTIONS = ("would_drain", "would_resume")
JOB_KINDS = ("seq_write", "seq_read", "rand_read")  # the NodeProbe field a job came from
# Early warning's marks (0009t): verdict.trend's TrendStatus and Scale values, spelt out so
# that opening the store (every prolog hook) does not import the fit; a test holds them equal.
TREND_STATUSES = ("DECLINING", "STEADY", "BELOW", "TOO_FEW")
TREND_SCALES = ("falling", "rising", "share", "counter")

# Deterministic constraint names, so migrations can refer to (and later drop) them by name.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# 64-bit ids on PostgreSQL (iostat rows add up); SQLite only autoincrements INTEGER.
Id = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Aware datetimes in, aware UTC datetimes out; SQLite (no time zones) stores naive UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("naive datetime: screener stores timezone-aware UTC only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _in(column: str, values: tuple[str, ...]) -> str:
    """SQL text for a CHECK that ``column`` holds one of ``values`` (our constants only).

    The column is double-quoted: ``trigger`` is a keyword in SQLite.
    """
    return f'"{column}" IN ({", ".join(repr(v) for v in values)})'


class Base(DeclarativeBase):
    """Declarative base with the naming convention and the portable type map."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        int: Id,
        float: Double(),
        str: Text(),
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[str]: JSON(),
    }


class NodeRecord(Base):
    """A node ever screened; ``last_seen`` is the start of the latest run that included it."""

    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]


class RunRecord(Base):
    """One screening run: why, over what, with which policy, and its fleet-level outcome."""

    __tablename__ = "runs"
    __table_args__ = (
        CheckConstraint(_in("trigger", tuple(t.value for t in Trigger)), name="trigger"),
        CheckConstraint(_in("status", RUN_STATUSES), name="status"),
        Index(None, "started_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    trigger: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[str | None] = mapped_column(String(64))
    nodeset: Mapped[str]
    node_count: Mapped[int] = mapped_column(Integer)
    policy: Mapped[dict[str, Any]]
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16))
    shared_cause: Mapped[bool] = mapped_column(default=False)
    shared_cause_reason: Mapped[str] = mapped_column(default="")
    peer_read_median_mb_s: Mapped[float | None]
    peer_rand_median_iops: Mapped[float | None]
    screener_version: Mapped[str] = mapped_column(String(32))
    # Set when the mass-drain guard tripped in this run: why nobody was drained.
    guard_reason: Mapped[str | None]


class NodeProbeRecord(Base):
    """One node in one probe round: error or not, how long it took, the raw outputs."""

    __tablename__ = "node_probes"
    __table_args__ = (
        UniqueConstraint("run_id", "node_id", "round"),
        CheckConstraint("round >= 1", name="round"),
        Index(None, "node_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    round: Mapped[int] = mapped_column(Integer)  # 1 = first probe, 2 = confirmation, ...
    fio_version: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None]
    error_kind: Mapped[str | None] = mapped_column(String(32))
    duration_s: Mapped[float]
    raw_fio: Mapped[str]
    raw_iostat: Mapped[str]
    # Fingerprint of the probe recipe (size, block sizes, iodepth, runtime, target, engine):
    # history compares only like with like. None for rows written before it existed.
    recipe: Mapped[str | None] = mapped_column(String(32))


class ProbeJobRecord(Base):
    """One fio job's figures; ``kind`` says which NodeProbe field it fills."""

    __tablename__ = "probe_jobs"
    __table_args__ = (
        UniqueConstraint("node_probe_id", "kind"),
        CheckConstraint(_in("kind", JOB_KINDS), name="kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_probe_id: Mapped[int] = mapped_column(ForeignKey("node_probes.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(64))  # fio's job name
    rw: Mapped[str] = mapped_column(String(16))
    bw_bytes: Mapped[float]
    iops: Mapped[float]
    total_ios: Mapped[int] = mapped_column(BigInteger)
    runtime_ms: Mapped[float]
    lat_mean_ns: Mapped[float]
    lat_p50_ns: Mapped[float]
    lat_p99_ns: Mapped[float]
    lat_p999_ns: Mapped[float]
    slow_fraction: Mapped[float]
    error: Mapped[int] = mapped_column(Integer)
    # Stall mode of the latency histogram (0006s; probe/stalls.py): rows from before are 0.
    iodepth: Mapped[int] = mapped_column(Integer, server_default="0")
    stall_ios: Mapped[int] = mapped_column(Integer, server_default="0")
    stall_ns: Mapped[float] = mapped_column(server_default="0")


class IostatRecord(Base):
    """One device line of one iostat interval taken during a probe; ``seq`` keeps the order."""

    __tablename__ = "iostat_samples"
    __table_args__ = (
        CheckConstraint("device <> ''", name="device"),
        Index(None, "node_probe_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_probe_id: Mapped[int] = mapped_column(ForeignKey("node_probes.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(64))
    ts: Mapped[str] = mapped_column(String(64))  # as iostat printed it (may be empty)
    r_s: Mapped[float]
    rkb_s: Mapped[float]
    w_s: Mapped[float]
    wkb_s: Mapped[float]
    r_await_ms: Mapped[float]
    w_await_ms: Mapped[float]
    aqu_sz: Mapped[float]
    util_pct: Mapped[float]


class FactsRecord(Base):
    """NodeFacts flattened (SMART as columns so dashboards can query them; md lists as JSON)."""

    __tablename__ = "node_facts"

    id: Mapped[int] = mapped_column(primary_key=True)
    node_probe_id: Mapped[int] = mapped_column(
        ForeignKey("node_probes.id", ondelete="CASCADE"), unique=True
    )
    device: Mapped[str | None] = mapped_column(String(64))
    pcie_speed: Mapped[str | None] = mapped_column(String(32))
    pcie_max_speed: Mapped[str | None] = mapped_column(String(32))
    pcie_width: Mapped[int | None] = mapped_column(Integer)
    pcie_max_width: Mapped[int | None] = mapped_column(Integer)
    scheduler: Mapped[str | None] = mapped_column(String(32))
    read_ahead_kb: Mapped[int | None] = mapped_column(Integer)
    nr_requests: Mapped[int | None] = mapped_column(Integer)
    write_cache: Mapped[str | None] = mapped_column(String(32))
    smart_critical_warning: Mapped[int | None] = mapped_column(Integer)
    smart_temperature_c: Mapped[float | None]
    smart_media_errors: Mapped[int | None] = mapped_column(BigInteger)
    smart_percentage_used: Mapped[int | None] = mapped_column(Integer)
    md_arrays: Mapped[list[str] | None]
    md_degraded: Mapped[list[str] | None]
    md_rebuilding: Mapped[list[str] | None]


class VerdictRecord(Base):
    """The decision for one node in one run; ``started_at`` is the run's, copied for indexing."""

    __tablename__ = "verdicts"
    __table_args__ = (
        UniqueConstraint("run_id", "node_id"),
        CheckConstraint(_in("status", tuple(s.value for s in Status)), name="status"),
        Index(None, "node_id", "started_at", "run_id"),  # 0003a: latest per node
        Index(None, "started_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    started_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str]
    read_mb_s: Mapped[float | None]
    write_mb_s: Mapped[float | None]
    rand_read_iops: Mapped[float | None]
    ratio: Mapped[float | None]
    read_p99_ms: Mapped[float | None]
    z_read: Mapped[float | None]
    z_rand: Mapped[float | None]
    confirmed: Mapped[bool] = mapped_column(default=False)
    signals: Mapped[list[str]]
    recipe: Mapped[str | None] = mapped_column(String(32))  # copied from the node's probe
    read_p999_ms: Mapped[float | None]
    rand_read_p99_ms: Mapped[float | None]
    # Figures usable as the node's own history (OK, or absolved by a shared cause).
    baseline: Mapped[bool | None]


class EpisodeRecord(Base):
    """A slow episode of one node: from the run that first found it slow (``trigger`` says
    which kind: prolog, sweep, job) until the run that found it passing again (open while
    ``ended_at`` is NULL). The flaky view counts and times these."""

    __tablename__ = "episodes"
    __table_args__ = (
        CheckConstraint(_in("trigger", tuple(t.value for t in Trigger)), name="trigger"),
        Index(None, "node_id", "started_at"),
        Index(None, "started_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    trigger: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    start_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    end_run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    job_id: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str]


class EventRecord(Base):
    """Something screener did (or refused to do) to a node in Slurm; see EVENT_ACTIONS (and
    INTENT_ACTIONS: a drain about to be made, or one found not made)."""

    __tablename__ = "node_events"
    __table_args__ = (
        CheckConstraint(
            _in("action", EVENT_ACTIONS + INTENT_ACTIONS + SCREEN_ACTIONS + DRY_RUN_ACTIONS),
            name="action",
        ),
        Index(None, "node_id", "at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    at: Mapped[datetime]
    action: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str]
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    slurm_reason: Mapped[str | None]
    job_id: Mapped[str | None] = mapped_column(String(64))  # the job it was done for (0004f)


class SentinelReadingRecord(Base):
    """A dd sentinel's figure for a node, taken right after its fio sentinel read as usual
    (issue 22): the yardstick later dd sentinels of that node are judged against."""

    __tablename__ = "sentinel_readings"
    __table_args__ = (Index(None, "node_id", "recipe", "at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"))
    at: Mapped[datetime]
    recipe: Mapped[str] = mapped_column(String(32))  # probe.sentinel.dd_recipe
    read_bw: Mapped[float]  # bytes/s


class TrendMarkRecord(Base):
    """A node's current early-warning verdict of one figure (issue 46; 0009t), as the sweep
    that last probed it fitted it (store/trend_marks.py): one row per node and figure,
    replaced whole at each refresh, so `screener nodes` and the exporter read the marks
    instead of fitting every node's sweeps. Columns as verdict.trend.TrendVerdict's."""

    __tablename__ = "trend_marks"
    __table_args__ = (
        CheckConstraint(_in("status", TREND_STATUSES), name="status"),
        CheckConstraint(_in("scale", TREND_SCALES), name="scale"),
        Index(None, "status"),  # the readers want the DECLINING few
    )

    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id"), primary_key=True)
    figure: Mapped[str] = mapped_column(String(32), primary_key=True)  # "seq read", ...
    status: Mapped[str] = mapped_column(String(16))
    scale: Mapped[str] = mapped_column(String(16))
    sweeps: Mapped[int] = mapped_column(Integer)  # points of the fitted series
    level: Mapped[float | None]
    per_sweep: Mapped[float | None]
    sweeps_to_cross: Mapped[float | None]
    days_to_cross: Mapped[float | None]
    crosses_at: Mapped[datetime | None]
    threshold: Mapped[float]
    recipe: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str]  # the words `screener trend` prints
    fitted_at: Mapped[datetime]
    # the sweep whose refresh fitted it (NULL: `screener trend --refresh`, or run deleted)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))


# ---- after the job (issue 12): ingested IOR/fio results, see screener/ingest ----------------
JOB_PHASES = ("write", "read")  # screener.ingest.results.Phase
JOB_SOURCES = ("ior_text", "ior_json", "ior_csv", "fio_json")  # ...results.SourceKind


class JobIngestRecord(Base):
    """One `screener ingest` of a job's benchmark outputs: which files, which rank layout,
    and what could not be known (``notes``). ``observed_at`` is when the job's I/O ran, as
    far as known (the ingest time when nothing better was given)."""

    __tablename__ = "job_ingests"
    __table_args__ = (Index(None, "job_id"), Index(None, "observed_at"))

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(String(64))
    partition: Mapped[str | None] = mapped_column(String(64))
    nodeset: Mapped[str]  # the nodes the ranks were mapped to ("" without per-rank data)
    layout: Mapped[str]  # how ranks were mapped, e.g. "block, 1 per node over 4 nodes"
    files: Mapped[list[str]]  # "kind:file name" per ingested file
    notes: Mapped[list[str]]
    observed_at: Mapped[datetime]
    ingested_at: Mapped[datetime]
    screener_version: Mapped[str] = mapped_column(String(32))


class JobResultRecord(Base):
    """A job's figure for one phase and iteration: per node, or for the whole job when
    ``node_id`` is NULL (then ``ratio`` is median node time / slowest node time)."""

    __tablename__ = "job_results"
    __table_args__ = (
        CheckConstraint(_in("phase", JOB_PHASES), name="phase"),
        CheckConstraint(_in("source", JOB_SOURCES), name="source"),
        CheckConstraint("iteration >= 0", name="iteration"),
        Index(None, "ingest_id"),
        Index(None, "job_id"),
        Index(None, "node_id", "ingested_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    ingest_id: Mapped[int] = mapped_column(ForeignKey("job_ingests.id", ondelete="CASCADE"))
    job_id: Mapped[str] = mapped_column(String(64))
    node_id: Mapped[int | None] = mapped_column(ForeignKey("nodes.id"))
    phase: Mapped[str] = mapped_column(String(8))
    iteration: Mapped[int] = mapped_column(Integer)
    ranks: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float]
    throughput_bytes_s: Mapped[float]
    ratio: Mapped[float | None]  # node: throughput / job's median node
    z: Mapped[float | None]  # robust log-space z vs the job's nodes
    outlier: Mapped[bool]
    source: Mapped[str] = mapped_column(String(16))
    ingested_at: Mapped[datetime]
