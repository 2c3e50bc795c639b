"""The admin read side: what ``screener nodes/history/flaky/show`` and the exporter look at.

Every query is written to stay fast at fleet scale (10,000 nodes x a year of nightly
sweeps, see docs/performance.md): "latest per node" is one index probe per node (a
correlated ``LIMIT 1`` on ``(node_id, started_at)``), never a scan of all verdicts, and
the windows (``--since``) are range scans. Results are the frozen rows of rows.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from statistics import median
from typing import Any, Protocol

from sqlalchemy import Connection, case, func, select, true
from sqlalchemy.orm import aliased

from screener.errors import StoreError
from screener.model import Status, Trigger
from screener.store import convert
from screener.store.engine import translated
from screener.store.reads import run_row
from screener.store.rows import (
    FlakyNodeRow,
    LatestVerdictRow,
    NodeHistoryRow,
    NodeRow,
    RunDetail,
    RunNodeRow,
    RunRow,
)
from screener.store.schema import (
    EpisodeRecord,
    EventRecord,
    NodeProbeRecord,
    NodeRecord,
    RunRecord,
    VerdictRecord,
)
from screener.store.store import Store

DRAIN_STATE_ACTIONS = ("drain", "resume")  # the events that change screener's drain state


class SlurmStates(Protocol):
    """The seam for the live Slurm state in ``screener nodes`` (screener.slurm provides one)."""

    def node_states(self, nodes: Sequence[str]) -> Mapping[str, str]:
        """Slurm's state per node name (e.g. "idle", "drained"); unknown nodes omitted."""
        ...


@contextmanager
def _read(store: Store, doing: str) -> Iterator[Connection]:
    """A read-only transaction that does not take SQLite's write lock."""
    with translated(doing), store.engine.connect() as conn:
        conn.execution_options(sqlite_begin="DEFERRED")
        with conn.begin():
            yield conn


def aware(value: datetime, what: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(f"{what} must be a timezone-aware datetime, got {value.isoformat()}")
    return value


def _latest_verdict_id() -> Any:
    """Correlated scalar subquery: the id of the node's newest verdict (one index probe)."""
    v = aliased(VerdictRecord)
    return (
        select(v.id)
        .where(v.node_id == NodeRecord.id)
        .order_by(v.started_at.desc(), v.run_id.desc())
        .limit(1)
        .correlate(NodeRecord)
        .scalar_subquery()
    )


def _latest_drain_event_id() -> Any:
    """Correlated scalar subquery: the node's newest drain or resume event."""
    e = aliased(EventRecord)
    return (
        select(e.id)
        .where(e.node_id == NodeRecord.id, e.action.in_(DRAIN_STATE_ACTIONS))
        .order_by(e.at.desc(), e.id.desc())
        .limit(1)
        .correlate(NodeRecord)
        .scalar_subquery()
    )


def _latest_ids() -> Any:
    """Per node: its id, name, newest verdict id and newest drain/resume event id.

    The correlated LIMIT 1 subqueries sit in a MATERIALIZED common table expression, and the
    verdict and event rows are joined by primary key afterwards: each node costs one probe of
    the (node_id, started_at, run_id) index. Inlined (a plain subquery, or the subquery as
    the join condition), PostgreSQL hashes every verdict row and runs the subquery twice.
    """
    return (
        select(
            NodeRecord.id.label("node_id"),
            NodeRecord.name.label("name"),
            _latest_verdict_id().label("verdict_id"),
            _latest_drain_event_id().label("event_id"),
        )
        .cte("latest")
        .prefix_with("MATERIALIZED", dialect="postgresql")
    )


# What `nodes` and the exporter need of the latest verdict (not the JSON signals, not z).
_OVERVIEW = (
    *("run_id", "started_at", "status", "reason"),
    *("read_mb_s", "write_mb_s", "ratio", "read_p99_ms"),
)


def _latest_rows(conn: Connection, columns: Sequence[str] | None = None) -> list[Any]:
    """Every node with its newest verdict's columns and its newest drain/resume event
    (``action``, ``at``, ``slurm_reason``), by name; verdict columns NULL if it has none.

    PostgreSQL: two LATERAL ``LIMIT 1`` joins, one index probe each per node. SQLite has no
    LATERAL: the ids come from the materialized CTE above, then rows by primary key.
    ``columns`` limits the verdict columns (default: all but node_id).
    """
    v, e = VerdictRecord, EventRecord
    names = columns or [c.name for c in v.__table__.c if c.name != "node_id"]
    if conn.dialect.name == "postgresql":
        lv = (
            select(*[getattr(v, n) for n in names])
            .where(v.node_id == NodeRecord.id)
            .order_by(v.started_at.desc(), v.run_id.desc())
            .limit(1)
            .lateral("lv")
        )
        le = (
            select(e.action, e.at, e.slurm_reason)
            .where(e.node_id == NodeRecord.id, e.action.in_(DRAIN_STATE_ACTIONS))
            .order_by(e.at.desc(), e.id.desc())
            .limit(1)
            .lateral("le")
        )
        query = (
            select(NodeRecord.name, *lv.c, *le.c)
            .select_from(NodeRecord)
            .outerjoin(lv, true())
            .outerjoin(le, true())
            .order_by(NodeRecord.name)
        )
    else:
        latest = _latest_ids()
        query = (
            select(latest.c.name, *[getattr(v, n) for n in names], e.action, e.at, e.slurm_reason)
            .select_from(latest)
            .outerjoin(v, v.id == latest.c.verdict_id)
            .outerjoin(e, e.id == latest.c.event_id)
            .order_by(latest.c.name)
        )
    return list(conn.execute(query).all())


def latest_verdicts(store: Store) -> list[LatestVerdictRow]:
    """Each node's most recent verdict (a later run id wins a tie on start time), by node."""
    with _read(store, "read the latest verdicts") as conn:
        rows = _latest_rows(conn)
    return [
        LatestVerdictRow(r.run_id, r.started_at, convert.verdict_from_row(r.name, r._mapping))
        for r in rows
        if r.run_id is not None
    ]


def node_overview(store: Store, now: datetime, slurm: SlurmStates | None = None) -> list[NodeRow]:
    """Every node: its latest verdict and figures, the age of its last probe, and whether
    screener drained it (its last drain/resume event is a drain). ``slurm`` adds live state."""
    now = aware(now, "now")
    with _read(store, "list nodes") as conn:
        rows = _latest_rows(conn, _OVERVIEW)
    states = slurm.node_states([r.name for r in rows]) if slurm is not None else {}
    out = []
    for r in rows:
        drained = r.action == "drain"
        out.append(
            NodeRow(
                node=r.name,
                status=None if r.status is None else Status(r.status),
                reason=r.reason or "",
                run_id=r.run_id,
                read_mb_s=r.read_mb_s,
                write_mb_s=r.write_mb_s,
                ratio=r.ratio,
                read_p99_ms=r.read_p99_ms,
                last_probe_at=r.started_at,
                age_s=None if r.started_at is None else (now - r.started_at).total_seconds(),
                drained_by_screener=drained,
                drained_at=r.at if drained else None,
                drain_reason=r.slurm_reason if drained else None,
                slurm_state=states.get(r.name),
            )
        )
    return out


def node_history(store: Store, node: str, since: datetime) -> list[NodeHistoryRow]:
    """The node's verdicts since ``since``, newest first (a range scan of one index)."""
    start = aware(since, "since")
    v = VerdictRecord
    with _read(store, f"read the history of {node}") as conn:
        node_id = conn.scalar(select(NodeRecord.id).where(NodeRecord.name == node))
        if node_id is None:
            raise StoreError(f"node {node} is not in the database")
        rows = conn.execute(
            select(v, RunRecord.trigger, RunRecord.job_id)
            .join(RunRecord, RunRecord.id == v.run_id)
            .where(v.node_id == node_id, v.started_at >= start)
            .order_by(v.started_at.desc(), v.run_id.desc())
        ).all()
    return [
        NodeHistoryRow(
            run_id=r.run_id,
            started_at=r.started_at,
            trigger=Trigger(r.trigger),
            job_id=r.job_id,
            status=Status(r.status),
            reason=r.reason,
            read_mb_s=r.read_mb_s,
            write_mb_s=r.write_mb_s,
            ratio=r.ratio,
            confirmed=bool(r.confirmed),
            read_p99_ms=r.read_p99_ms,
            signals=tuple(r.signals or ()),
        )
        for r in rows
    ]


def flaky(store: Store, since: datetime, min_episodes: int) -> list[FlakyNodeRow]:
    """Nodes with at least ``min_episodes`` slow episodes started since ``since`` (prolog,
    sweep and in-job alike), most episodes first, then most time spent slow."""
    start = aware(since, "since")
    ep = EpisodeRecord
    repeat = (
        select(ep.node_id)
        .where(ep.started_at >= start)
        .group_by(ep.node_id)
        .having(func.count() >= max(min_episodes, 1))
    )
    with _read(store, "find flaky nodes") as conn:
        episodes = conn.execute(
            select(NodeRecord.name, ep.trigger, ep.started_at, ep.ended_at)
            .join(NodeRecord, NodeRecord.id == ep.node_id)
            .where(ep.started_at >= start, ep.node_id.in_(repeat))
            .order_by(NodeRecord.name, ep.started_at, ep.id)
        ).all()
        resumes = dict(
            conn.execute(
                select(NodeRecord.name, func.count())
                .join(EventRecord, EventRecord.node_id == NodeRecord.id)
                .where(
                    EventRecord.action == "resume",
                    EventRecord.at >= start,
                    EventRecord.node_id.in_(repeat),
                )
                .group_by(NodeRecord.name)
            ).all()
        )
    by_node: dict[str, list[Any]] = defaultdict(list)
    for row in episodes:
        by_node[row.name].append(row)
    out = [_flaky_row(name, eps, int(resumes.get(name, 0))) for name, eps in by_node.items()]
    slow_time = {r.node: sum(_durations(by_node[r.node])) for r in out}
    return sorted(out, key=lambda r: (-r.episodes, -slow_time[r.node], r.node))


def _durations(eps: Sequence[Any]) -> list[float]:
    """Seconds from start to end of the closed episodes."""
    return [(e.ended_at - e.started_at).total_seconds() for e in eps if e.ended_at is not None]


def _flaky_row(name: str, eps: Sequence[Any], resumes: int) -> FlakyNodeRow:
    """Aggregate one node's episodes (time-ordered) into its flaky row."""
    ttr = _durations(eps)
    by_trigger = defaultdict(int, {t.value: 0 for t in Trigger})
    for e in eps:
        by_trigger[e.trigger] += 1
    return FlakyNodeRow(
        node=name,
        episodes=len(eps),
        prolog=by_trigger[Trigger.PROLOG.value],
        sweep=by_trigger[Trigger.SWEEP.value],
        job=by_trigger[Trigger.JOB.value],
        manual=by_trigger[Trigger.MANUAL.value],
        first_seen=eps[0].started_at,
        last_seen=max(e.ended_at or e.started_at for e in eps),
        open=eps[-1].ended_at is None,
        ttr_median_s=median(ttr) if ttr else None,
        ttr_max_s=max(ttr) if ttr else None,
        resumes=resumes,
    )


def run_detail(store: Store, run_id: int) -> RunDetail:
    """One run: its header, and per node the verdict, figures, signals and screener's actions."""
    with _read(store, f"read run {run_id}") as conn:
        run = conn.execute(select(RunRecord).where(RunRecord.id == run_id)).first()
        if run is None:
            raise StoreError(f"run {run_id} does not exist")
        verdicts = conn.execute(
            select(NodeRecord.name, VerdictRecord)
            .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
            .where(VerdictRecord.run_id == run_id)
            .order_by(NodeRecord.name)
        ).all()
        events = conn.execute(
            select(NodeRecord.name, EventRecord.action, EventRecord.slurm_reason)
            .join(NodeRecord, NodeRecord.id == EventRecord.node_id)
            .where(EventRecord.run_id == run_id)
            .order_by(EventRecord.at, EventRecord.id)
        ).all()
    counts: dict[str, int] = defaultdict(int)
    for v in verdicts:
        counts[v.status] += 1
    actions: dict[str, list[str]] = defaultdict(list)
    reasons: dict[str, str] = {}
    for ev in events:
        actions[ev.name].append(ev.action)
        if ev.slurm_reason:
            reasons[ev.name] = ev.slurm_reason
    nodes = tuple(
        RunNodeRow(
            node=v.name,
            status=Status(v.status),
            read_mb_s=v.read_mb_s,
            write_mb_s=v.write_mb_s,
            ratio=v.ratio,
            read_p99_ms=v.read_p99_ms,
            z_read=v.z_read,
            confirmed=bool(v.confirmed),
            signals=tuple(v.signals or ()),
            reason=v.reason,
            actions=tuple(actions.get(v.name, ())),
            slurm_reason=reasons.get(v.name),
        )
        for v in verdicts
    )
    header: RunRow = run_row(run, counts)
    return RunDetail(header, run.guard_reason, run.peer_read_median_mb_s, nodes)


def counters(store: Store) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """Totals for the exporter: runs by (trigger, status), node events by action."""
    with _read(store, "count runs and events") as conn:
        runs = conn.execute(
            select(RunRecord.trigger, RunRecord.status, func.count()).group_by(
                RunRecord.trigger, RunRecord.status
            )
        ).all()
        events = conn.execute(
            select(EventRecord.action, func.count()).group_by(EventRecord.action)
        ).all()
    return {(t, s): int(n) for t, s, n in runs}, {a: int(n) for a, n in events}


def probe_duration_buckets(
    store: Store, after_id: int, bounds: Sequence[float]
) -> tuple[int, list[int], int, float]:
    """Over node probes with id > ``after_id``: (highest id, count at or below each bound,
    count, sum of seconds), counted by the database. The exporter adds these up scrape
    after scrape, so its histogram never rescans the whole probe table."""
    p = NodeProbeRecord
    cols = [func.sum(case((p.duration_s <= b, 1), else_=0)) for b in bounds]
    with _read(store, "read probe durations") as conn:
        row = conn.execute(
            select(func.max(p.id), func.count(), func.sum(p.duration_s), *cols).where(
                p.id > after_id
            )
        ).one()
    if not row[1]:
        return after_id, [0] * len(bounds), 0, 0.0
    return int(row[0]), [int(c or 0) for c in row[3:]], int(row[1]), float(row[2] or 0.0)
