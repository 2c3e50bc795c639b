"""Store side of "after the job": record an ingest (results + in-job episodes), and read
back what `screener accuracy` and `screener ingest --show` need.

Functions over a Store (its engine), so store.py stays as it is. Each write is one
transaction: an ingest is all stored or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete, insert, select

from screener.errors import StoreError
from screener.probe_data import Status, Trigger
from screener.store import convert
from screener.store.base import JOB_ID_MAX, aware, ensure_nodes, new_id
from screener.store.engine import screener_version
from screener.store.store import Store
from screener.store.tables import (
    EpisodeRecord,
    EventRecord,
    JobIngestRecord,
    JobResultRecord,
    NodeRecord,
    RunRecord,
    VerdictRecord,
)
from screener.units import unit

# Reason prefix of the episodes ingest writes (SlowNode reasons start with it), so a
# --replace removes only those, never another writer's trigger-"job" episodes (the
# epilog's in-job iostat writes "in-job r_await ..." for the same job just before).
EPISODE_PREFIX = "in-job read "


@dataclass(frozen=True)
class IngestHead:
    """What describes one ingest apart from its figures."""

    job_id: str
    partition: str | None
    nodeset: str
    layout: str
    files: tuple[str, ...]  # "kind:name"
    notes: tuple[str, ...]
    observed_at: datetime


@dataclass(frozen=True)
class ResultRow:
    """One stored figure (node None = the whole job)."""

    node: str | None
    phase: str
    iteration: int
    ranks: int
    bytes: int = field(metadata=unit("bytes", "bytes"))
    seconds: float = field(metadata=unit("s", "seconds"))
    throughput_bytes_s: float = field(metadata=unit("bytes/s", "throughput"))
    ratio: float | None = field(metadata=unit("ratio", "ratio"))
    z: float | None
    outlier: bool
    source: str


@dataclass(frozen=True)
class SlowRow:
    """An in-job slow node to record as an episode."""

    node: str
    reason: str


@dataclass(frozen=True)
class InJobRow:
    """Per job and node, the in-job read judgement of the job's latest ingest."""

    job_id: str
    partition: str | None
    observed_at: datetime
    node: str
    judged: bool  # a read figure with a z-score exists (enough nodes)
    outlier: bool  # an outlier in at least one read iteration


FAST_PATH_RUN = 0  # PrologRow.run_id of a fast-path node (no run probed it for this job)


@dataclass(frozen=True)
class PrologRow:
    """A prolog verdict of a node for a job (``run_id`` FAST_PATH_RUN: it passed recently
    and joined the job unprobed, a ``fast_path`` event)."""

    job_id: str
    run_id: int
    started_at: datetime
    node: str
    status: Status
    signals: tuple[str, ...] = ()  # the rules that fired (shadowed ones as shadow:NAME)


def _job_id(job_id: str) -> str:
    if not 0 < len(job_id) <= JOB_ID_MAX:
        raise StoreError(f"job id must be 1..{JOB_ID_MAX} characters, got {job_id!r}")
    return job_id


def record_ingest(
    store: Store,
    head: IngestHead,
    results: Sequence[ResultRow],
    slow: Sequence[SlowRow],
    *,
    now: datetime,
    replace: bool = False,
) -> int:
    """Store one ingest of a job with its figures and in-job episodes; returns its id.

    A job already ingested is refused unless ``replace``: then its earlier ingests and the
    episodes they wrote are removed in the same transaction.
    """
    job = _job_id(head.job_id)
    at, observed = aware(now, "now"), aware(head.observed_at, "observed_at")
    names = sorted({convert.node_name(r.node) for r in results if r.node is not None})
    for s in slow:
        convert.node_name(s.node)
        if not s.reason.startswith(EPISODE_PREFIX):
            raise StoreError(f"in-job episode reason must start with {EPISODE_PREFIX!r}")
    with store.writing(f"record the ingest of job {job}") as conn:
        earlier = conn.scalars(
            select(JobIngestRecord.ingested_at).where(JobIngestRecord.job_id == job)
        ).all()
        if earlier and not replace:
            raise StoreError(
                f"job {job} was already ingested at {max(earlier):%Y-%m-%d %H:%M:%S} UTC; "
                "pass --replace to replace it"
            )
        if earlier:
            conn.execute(delete(JobIngestRecord).where(JobIngestRecord.job_id == job))
            conn.execute(
                delete(EpisodeRecord).where(
                    EpisodeRecord.trigger == Trigger.JOB.value,
                    EpisodeRecord.job_id == job,
                    EpisodeRecord.reason.startswith(EPISODE_PREFIX, autoescape=True),
                )
            )
        ids = ensure_nodes(conn, names, observed, touch=False)
        ingest_id = new_id(
            conn.execute(
                insert(JobIngestRecord).values(
                    job_id=job,
                    partition=head.partition,
                    nodeset=head.nodeset,
                    layout=head.layout,
                    files=list(head.files),
                    notes=list(head.notes),
                    observed_at=observed,
                    ingested_at=at,
                    screener_version=screener_version(),
                )
            )
        )
        if results:
            conn.execute(
                insert(JobResultRecord),
                [
                    {
                        "ingest_id": ingest_id,
                        "job_id": job,
                        "node_id": None if r.node is None else ids[r.node],
                        "phase": r.phase,
                        "iteration": r.iteration,
                        "ranks": r.ranks,
                        "bytes": r.bytes,
                        "seconds": r.seconds,
                        "throughput_bytes_s": r.throughput_bytes_s,
                        "ratio": convert.figure(r.ratio),
                        "z": convert.figure(r.z),
                        "outlier": r.outlier,
                        "source": r.source,
                        "ingested_at": at,
                    }
                    for r in results
                ],
            )
        if slow:
            conn.execute(
                insert(EpisodeRecord),
                [
                    {
                        "node_id": ids[s.node],
                        "trigger": Trigger.JOB.value,
                        "started_at": observed,
                        "ended_at": observed,  # seen during the job; later runs tell more
                        "start_run_id": None,
                        "end_run_id": None,
                        "job_id": job,
                        "reason": s.reason,
                    }
                    for s in slow
                ],
            )
        return ingest_id


def job_results(store: Store, job_id: str) -> list[ResultRow]:
    """The figures of the job's latest ingest: whole job first, then by node."""
    job = _job_id(job_id)
    with store.reading(f"read the results of job {job}") as conn:
        latest = conn.scalar(
            select(JobIngestRecord.id)
            .where(JobIngestRecord.job_id == job)
            .order_by(JobIngestRecord.ingested_at.desc(), JobIngestRecord.id.desc())
            .limit(1)
        )
        if latest is None:
            return []
        rows = conn.execute(
            select(NodeRecord.name, JobResultRecord)
            .outerjoin(NodeRecord, NodeRecord.id == JobResultRecord.node_id)
            .where(JobResultRecord.ingest_id == latest)
        ).all()
    out = [
        ResultRow(
            r.name,
            r.phase,
            r.iteration,
            r.ranks,
            r.bytes,
            r.seconds,
            r.throughput_bytes_s,
            r.ratio,
            r.z,
            bool(r.outlier),
            r.source,
        )
        for r in rows
    ]
    return sorted(out, key=lambda r: (r.node is not None, r.node or "", r.phase, r.iteration))


def in_job_reads(store: Store, since: datetime) -> list[InJobRow]:
    """Per job ingested (latest ingest) with I/O observed since ``since``, per node: was
    its read phase judged, and was it an outlier."""
    start = aware(since, "since")
    with store.reading("read in-job results") as conn:
        heads = conn.execute(
            select(JobIngestRecord)
            .where(JobIngestRecord.observed_at >= start)
            .order_by(JobIngestRecord.job_id, JobIngestRecord.ingested_at, JobIngestRecord.id)
        ).all()
        latest = {h.job_id: h for h in heads}  # the last one of each job wins
        if not latest:
            return []
        rows = conn.execute(
            select(
                JobResultRecord.ingest_id,
                NodeRecord.name,
                JobResultRecord.z,
                JobResultRecord.outlier,
            )
            .join(NodeRecord, NodeRecord.id == JobResultRecord.node_id)
            .where(
                JobResultRecord.ingest_id.in_([h.id for h in latest.values()]),
                JobResultRecord.phase == "read",
            )
        ).all()
    by_ingest = {h.id: h for h in latest.values()}
    judged: dict[tuple[int, str], tuple[bool, bool]] = {}
    for ingest_id, name, z, outlier in rows:
        was = judged.get((ingest_id, name), (False, False))
        judged[(ingest_id, name)] = (was[0] or z is not None, was[1] or bool(outlier))
    return [
        InJobRow(by_ingest[i].job_id, by_ingest[i].partition, by_ingest[i].observed_at, name, j, o)
        for (i, name), (j, o) in sorted(judged.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    ]


def prolog_verdicts(store: Store, job_ids: Sequence[str]) -> list[PrologRow]:
    """Every prolog verdict recorded for these jobs (all attempts), oldest run first."""
    if not job_ids:
        return []
    out: list[PrologRow] = []
    with store.reading("read prolog verdicts") as conn:
        for chunk in range(0, len(job_ids), 500):  # keep IN lists a sane size
            out.extend(
                PrologRow(
                    r.job_id,
                    r.run_id,
                    r.started_at,
                    r.name,
                    Status(r.status),
                    tuple(r.signals or ()),
                )
                for r in conn.execute(
                    select(
                        RunRecord.job_id,
                        VerdictRecord.run_id,
                        RunRecord.started_at,
                        NodeRecord.name,
                        VerdictRecord.status,
                        VerdictRecord.signals,
                    )
                    .join(RunRecord, RunRecord.id == VerdictRecord.run_id)
                    .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
                    .where(
                        RunRecord.trigger == Trigger.PROLOG.value,
                        RunRecord.job_id.in_(list(job_ids[chunk : chunk + 500])),
                    )
                )
            )
        for chunk in range(0, len(job_ids), 500):  # nodes the prolog let in on the fast path
            out.extend(
                PrologRow(r.job_id, FAST_PATH_RUN, r.at, r.name, Status.OK)
                for r in conn.execute(
                    select(EventRecord.job_id, EventRecord.at, NodeRecord.name)
                    .join(NodeRecord, NodeRecord.id == EventRecord.node_id)
                    .where(
                        EventRecord.action == "fast_path",
                        EventRecord.job_id.in_(list(job_ids[chunk : chunk + 500])),
                    )
                )
            )
    return sorted(out, key=lambda r: (r.started_at, r.run_id, r.node))


def ingest_notes(store: Store, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The notes of each job's latest ingest (what could not be judged, and why), so `job`
    and `accuracy` can say which phases were too short to judge."""
    out: dict[str, tuple[str, ...]] = {}
    with store.reading("read ingest notes") as conn:
        for chunk in range(0, len(job_ids), 500):
            rows = conn.execute(
                select(JobIngestRecord.job_id, JobIngestRecord.notes)
                .where(JobIngestRecord.job_id.in_(list(job_ids[chunk : chunk + 500])))
                .order_by(JobIngestRecord.ingested_at, JobIngestRecord.id)
            ).all()
            for job_id, notes in rows:  # the last ingest of each job wins
                out[job_id] = tuple(str(n) for n in notes or ())
    return out
