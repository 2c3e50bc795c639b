"""Early warning's stored marks (issue 46): each node's trend verdict per figure, fitted once
after the sweep that probed it and kept in ``trend_marks`` (one row per node and figure), so
the readers that want it on every use, `screener nodes` and the exporter, read the few
DECLINING rows (one query) instead of fitting every node's sweeps (store/trend.py: 15 s at
10,000 nodes x 90 nightly sweeps on SQLite). `screener trend` still fits on demand.

A mark is as fresh as the node's last sweep: each sweep refreshes the nodes it probed
(sweep/job.py), `screener trend --refresh` every node. A node no sweep has probed within
``[trend] since_days`` has no series left, so the readers leave out marks fitted before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ARRAY, Connection, Text, any_, bindparam, delete, insert, select, text

from screener.policy import Policy
from screener.store import convert
from screener.store.base import aware
from screener.store.store import Store
from screener.store.tables import NodeRecord, TrendMarkRecord
from screener.store.trend import node_trends
from screener.units import label
from screener.verdict.trend import Scale, TrendStatus, TrendVerdict

# PostgreSQL advisory-lock class (locks.py uses 0x5C7E/F, replayed.py 0x5C80/1): two
# refreshes of the same nodes (a rolling sweep during the nightly one) replace their rows one
# after the other. SQLite needs none: its writers are serialised (BEGIN IMMEDIATE).
_REFRESH_CLASS = 0x5C82


@dataclass(frozen=True, kw_only=True)
class TrendMark(TrendVerdict):
    """A stored trend verdict: what ``node_trends`` said when it was fitted (``fitted_at``),
    after the sweep ``run_id`` (None: refreshed by hand, or that run is gone)."""

    fitted_at: datetime = field(metadata=label("fitted"))
    run_id: int | None = field(metadata=label("run"))


_MARK_COLUMNS = (  # what read_marks selects beside the node's name
    *("figure", "status", "scale", "sweeps", "level", "per_sweep", "sweeps_to_cross"),
    *("days_to_cross", "crosses_at", "threshold", "recipe", "reason", "fitted_at", "run_id"),
)


def _named(conn: Connection, names: Sequence[str]) -> Any:
    """``nodes.name`` among ``names``: one array parameter on PostgreSQL (a 10,000-name IN
    list costs psycopg seconds to bind), an IN list on SQLite."""
    if conn.dialect.name == "postgresql":
        return NodeRecord.name == any_(bindparam("names", list(names), type_=ARRAY(Text())))
    return NodeRecord.name.in_(list(names))


def _row(node_id: int, v: TrendVerdict, fitted_at: datetime, run_id: int | None) -> dict[str, Any]:
    """The ``trend_marks`` columns of one verdict."""
    return {
        "node_id": node_id,
        "figure": v.figure,
        "status": TrendStatus(v.status).value,
        "scale": Scale(v.scale).value,
        "sweeps": v.sweeps,
        "level": convert.figure(v.level),
        "per_sweep": convert.figure(v.per_sweep),
        "sweeps_to_cross": convert.figure(v.sweeps_to_cross),
        "days_to_cross": convert.figure(v.days_to_cross),
        "crosses_at": v.crosses_at,
        "threshold": v.threshold,
        "recipe": v.recipe,
        "reason": v.reason,
        "fitted_at": fitted_at,
        "run_id": run_id,
    }


def refresh_marks(
    store: Store,
    policy: Policy,
    now: datetime,
    nodes: Sequence[str] | None = None,
    run_id: int | None = None,
) -> list[TrendVerdict]:
    """Fit ``nodes`` (None: every node with sweeps) as ``node_trends`` does under
    ``policy`` (its [trend] horizon) and replace their stored marks with the result, in one
    transaction: a node the fit now leaves out loses its marks. ``run_id``: the sweep that
    asked. Returns the verdicts fitted. The fit reads outside the write transaction."""
    when = aware(now, "now")
    names = None if nodes is None else sorted({convert.node_name(n) for n in nodes})
    if names == []:
        return []
    fitted = node_trends(store, policy, when, names)
    mark = TrendMarkRecord
    with store.writing("store the trend marks") as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:c, 0)"), {"c": _REFRESH_CLASS})
        if names is None:
            conn.execute(delete(mark))
            ids = {n: int(i) for n, i in conn.execute(select(NodeRecord.name, NodeRecord.id))}
        else:
            query = select(NodeRecord.name, NodeRecord.id).where(_named(conn, names))
            ids = {n: int(i) for n, i in conn.execute(query)}
            theirs = select(NodeRecord.id).where(_named(conn, names))
            conn.execute(delete(mark).where(mark.node_id.in_(theirs)))
        rows = [_row(ids[v.node], v, when, run_id) for v in fitted]
        if rows:
            conn.execute(insert(mark), rows)
    return fitted


def read_marks(
    store: Store,
    nodes: Sequence[str] | None = None,
    *,
    declining_only: bool = False,
    since: datetime | None = None,
) -> list[TrendMark]:
    """The stored marks of ``nodes`` (None: every node), by node and figure, in one query:
    only the DECLINING ones with ``declining_only`` (an index probe: the readers' case),
    only those fitted at or after ``since``."""
    m = TrendMarkRecord
    query = (
        select(NodeRecord.name.label("node"), *(getattr(m, c) for c in _MARK_COLUMNS))
        .join(NodeRecord, NodeRecord.id == m.node_id)
        .order_by(NodeRecord.name, m.figure)
    )
    if declining_only:
        query = query.where(m.status == TrendStatus.DECLINING.value)
    if since is not None:
        query = query.where(m.fitted_at >= aware(since, "since"))
    with store.reading("read the trend marks") as conn:
        if nodes is not None:
            names = [convert.node_name(n) for n in nodes]
            if not names:
                return []
            query = query.where(_named(conn, names))
        rows = conn.execute(query).all()
    return [
        TrendMark(
            node=r.node,
            figure=r.figure,
            status=TrendStatus(r.status),
            sweeps=r.sweeps,
            level=r.level,
            per_sweep=r.per_sweep,
            sweeps_to_cross=r.sweeps_to_cross,
            days_to_cross=r.days_to_cross,
            crosses_at=r.crosses_at,
            threshold=r.threshold,
            recipe=r.recipe,
            reason=r.reason,
            scale=Scale(r.scale),
            fitted_at=r.fitted_at,
            run_id=r.run_id,
        )
        for r in rows
    ]
