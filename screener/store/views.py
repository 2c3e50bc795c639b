"""The admin read side per node: what ``screener nodes`` and ``screener history`` show and
the per-node figures the exporter serves. Runs, episodes and counts are in run_views.py;
this module re-exports them, so ``views.flaky``, ``views.run_detail`` and the rest work
as before.

Every query is written to stay fast at fleet scale (10,000 nodes x a year of nightly
sweeps, see docs/performance.md): "latest per node" is one index probe per node (a
``LIMIT 1`` on ``(node_id, started_at, run_id)``), never a scan of all verdicts, and the
windows (``--since``) are range scans. Results are the frozen rows of query_rows.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select, true
from sqlalchemy.orm import aliased

from screener.errors import StoreError
from screener.policy import Policy
from screener.probe_data import Status, Trigger
from screener.store.base import aware
from screener.store.query_rows import NodeHistoryRow, NodeRow
from screener.store.run_views import counters, flaky, probe_duration_buckets, run_detail
from screener.store.store import Store
from screener.store.tables import EventRecord, NodeRecord, RunRecord, VerdictRecord
from screener.store.trend_marks import read_marks
from screener.verdict.trend import TrendStatus, TrendVerdict, short_words

__all__ = [
    "DRAIN_STATE_ACTIONS",
    "NodeColumns",
    "aware",
    "change_marks",
    "counters",
    "flaky",
    "mark_declining",
    "node_columns",
    "node_history",
    "node_overview",
    "probe_duration_buckets",
    "run_detail",
]

DRAIN_STATE_ACTIONS = ("drain", "resume")  # the events that change screener's drain state


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


def _latest_rows(
    conn: Connection,
    columns: Sequence[str],
    events: Sequence[str] = ("action", "at", "slurm_reason"),
) -> list[Any]:
    """Every node with its newest verdict's columns and its newest drain/resume event's
    ``events`` columns, by name; verdict columns NULL if it has none.

    PostgreSQL: two LATERAL ``LIMIT 1`` joins, one index probe each per node. SQLite has no
    LATERAL: the ids come from the materialized CTE above, then rows by primary key.
    ``columns`` are the verdict columns wanted.
    """
    v, e = VerdictRecord, EventRecord
    names = list(columns)
    ecols = [getattr(e, n) for n in events]
    if conn.dialect.name == "postgresql":
        # 10,000 LIMIT 1 probes cost more than jit_above_cost, yet run in ~35 ms: compiling
        # them (15 ms and more) would only add to it. SET LOCAL ends with the transaction.
        conn.exec_driver_sql("SET LOCAL jit = off")
        lv = (
            select(*[getattr(v, n) for n in names])
            .where(v.node_id == NodeRecord.id)
            .order_by(v.started_at.desc(), v.run_id.desc())
            .limit(1)
            .lateral("lv")
        )
        le = (
            select(*ecols)
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
            select(latest.c.name, *[getattr(v, n) for n in names], *ecols)
            .select_from(latest)
            .outerjoin(v, v.id == latest.c.verdict_id)
            .outerjoin(e, e.id == latest.c.event_id)
            .order_by(latest.c.name)
        )
    return list(conn.execute(query).all())


_STATUS = {s.value: s for s in Status}


def node_overview(store: Store, now: datetime, policy: Policy | None = None) -> list[NodeRow]:
    """Every node: its latest verdict and figures, the age of its last probe, and whether
    screener drained it (its last drain/resume event is a drain); with ``policy``, DECLINING
    nodes marked too, from the marks the sweeps stored (trend_marks.read_marks: one query
    of the DECLINING rows, none fitted before [trend] since_days), never fitted here."""
    now = aware(now, "now")
    with store.reading("list nodes") as conn:
        rows = _latest_rows(conn, _OVERVIEW)
    out = []
    # tuples unpacked in _OVERVIEW order: attribute access on 10,000 rows costs tens of ms
    for name, run_id, started, status, reason, read, write, ratio, p99, action, at, why in rows:
        drained = action == "drain"
        out.append(
            NodeRow(
                node=name,
                status=None if status is None else _STATUS[status],
                reason=reason or "",
                run_id=run_id,
                read_mb_s=read,
                write_mb_s=write,
                ratio=ratio,
                read_p99_ms=p99,
                last_probe_at=started,
                age_s=None if started is None else (now - started).total_seconds(),
                drained_by_screener=drained,
                drained_at=at if drained else None,
                drain_reason=why if drained else None,
            )
        )
    if policy is None:
        return out
    since = now - timedelta(days=policy.trend.since_days)
    return mark_declining(out, read_marks(store, declining_only=True, since=since), now)


def forecast_in(crosses_at: datetime | None, now: datetime) -> str | None:
    """'~9d' (days from ``now`` to a forecast crossing, rounded) or '<1d': short for 80
    columns; None without a forecast date."""
    if crosses_at is None:
        return None
    days = (crosses_at - now).total_seconds() / 86_400
    return "<1d" if days < 1 else f"~{days:.0f}d"


def mark_declining(
    rows: Sequence[NodeRow], trends: Sequence[TrendVerdict], now: datetime
) -> list[NodeRow]:
    """``rows`` with each DECLINING node's trend words in short (verdict.trend.short_words:
    'seq read 0.78x peers, -0.03x/sweep, slow ~2026-12-08'; every declining figure, the
    soonest crossing first, joined by ' | ') and how soon after ``now`` that first crossing
    is forecast; status and drains untouched (a trend is a warning, never a verdict). Pure."""
    falling: dict[str, list[TrendVerdict]] = {}
    for v in trends:
        if v.status is TrendStatus.DECLINING:
            falling.setdefault(v.node, []).append(v)
    out = []
    for row in rows:
        mine = sorted(
            falling.get(row.node, ()),
            key=lambda v: (v.days_to_cross is None, v.days_to_cross or 0.0, v.figure),
        )
        if not mine:
            out.append(row)
            continue
        words = " | ".join(short_words(v) for v in mine)
        out.append(replace(row, declining=words, slow_in=forecast_in(mine[0].crosses_at, now)))
    return out


@dataclass(frozen=True)
class NodeColumns:
    """Every node's series in the exporter, as columns (index i is one node, by name): its
    latest verdict's figures as stored (MB/s, ms), when that verdict's run started, and
    whether screener holds it drained. None: no verdict (or no such figure) yet."""

    node: Sequence[str]
    status: Sequence[str | None]  # Status values
    read_mb_s: Sequence[float | None]
    write_mb_s: Sequence[float | None]
    ratio: Sequence[float | None]
    read_p99_ms: Sequence[float | None]
    last_probe_at: Sequence[datetime | None]
    drained_by_screener: Sequence[bool]
    drained_at: Sequence[datetime | None] = ()  # when screener drained it (None: not drained)


_FIGURES = ("status", "read_mb_s", "write_mb_s", "ratio", "read_p99_ms", "started_at")


def node_columns(store: Store) -> NodeColumns:
    """What the exporter needs of every node, in one query: the same latest verdict and
    drain state as ``node_overview``, only the columns it exports, transposed to columns
    (a scrape of 10,000 nodes spends its time here and in rendering, docs/performance.md)."""
    with store.reading("read the nodes' latest figures") as conn:
        rows = _latest_rows(conn, _FIGURES, ("action", "at"))
    if not rows:
        return NodeColumns((), (), (), (), (), (), (), ())
    node, status, read, write, ratio, p99, started, action, at = zip(*rows, strict=True)
    drained = [a == "drain" for a in action]
    return NodeColumns(
        node,
        status,
        read,
        write,
        ratio,
        p99,
        started,
        drained,
        [t if d else None for t, d in zip(at, drained, strict=True)],
    )


def change_marks(store: Store) -> tuple[int, int, int]:
    """The highest node, verdict and node-event ids (three primary-key lookups): while they
    stay the same, no node, verdict or drain/resume has been added, so ``node_columns``
    would return the same (the store only inserts these rows; it never updates them)."""
    with store.reading("read the newest ids") as conn:
        row = conn.execute(
            select(
                select(func.max(NodeRecord.id)).scalar_subquery(),
                select(func.max(VerdictRecord.id)).scalar_subquery(),
                select(func.max(EventRecord.id)).scalar_subquery(),
            )
        ).one()
    return int(row[0] or 0), int(row[1] or 0), int(row[2] or 0)


def node_history(store: Store, node: str, since: datetime) -> list[NodeHistoryRow]:
    """The node's verdicts since ``since``, newest first (a range scan of one index)."""
    start = aware(since, "since")
    v = VerdictRecord
    with store.reading(f"read the history of {node}") as conn:
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
