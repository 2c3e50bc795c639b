"""Early warning's read side (issue 46): each node's sweep figures over its round's peer
median, per recipe, and the trend verdicts over them (screener.verdict.trend).

A point is a node's **round-1** probe in a sweep (nightly or rolling) that ran without
error, over the run's round-1 peer median (``runs.peer_read_median_mb_s`` /
``peer_rand_median_iops``, what the peer rules judged it against), so a shared slowdown
moves the node and its median together and is no decline. Round 2 (a re-probe beside
references, fewer nodes, faster) is another yardstick and is left out. No schema change:
every figure, median and recipe fingerprint is already stored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select

from screener.policy import Policy
from screener.probe_data import Trigger
from screener.store.base import aware
from screener.store.store import Store
from screener.store.tables import NodeProbeRecord, NodeRecord, ProbeJobRecord, RunRecord
from screener.verdict.trend import Point, TrendStatus, TrendVerdict, declining

SWEEPS = (Trigger.SWEEP.value, Trigger.ROLLING.value)
SEQ_READ, RAND_READ = "seq read", "rand read"  # the figures fitted, as the words name them


@dataclass(frozen=True)
class NodeSeries:
    """One node's points per figure (oldest first, every recipe: the fit picks its own)."""

    node: str
    points: dict[str, list[Point]]


def node_series(store: Store, nodes: Sequence[str] | None, since: datetime) -> list[NodeSeries]:
    """Each node's (``nodes``, or every node with a sweep) seq-read and random-read points
    since ``since``, by node name; a node with none is left out."""
    start = aware(since, "since")
    np, job, run = NodeProbeRecord, ProbeJobRecord, RunRecord
    query = (
        select(
            NodeRecord.name,
            run.id,
            run.started_at,
            np.recipe,
            job.kind,
            job.bw_bytes,
            job.iops,
            run.peer_read_median_mb_s,
            run.peer_rand_median_iops,
        )
        .join(np, np.run_id == run.id)
        .join(NodeRecord, NodeRecord.id == np.node_id)
        .join(job, job.node_probe_id == np.id)
        .where(
            run.trigger.in_(SWEEPS),
            run.started_at >= start,
            np.round == 1,
            np.error.is_(None),
            job.error == 0,
            job.kind.in_(("seq_read", "rand_read")),
        )
        .order_by(NodeRecord.name, run.started_at, run.id)
    )
    if nodes is not None:
        query = query.where(NodeRecord.name.in_(list(nodes)))
    per: dict[str, dict[str, list[Point]]] = defaultdict(lambda: {SEQ_READ: [], RAND_READ: []})
    with store.reading("read the nodes' sweep figures") as conn:
        rows = conn.execute(query).all()
    for name, run_id, at, recipe, kind, bw, iops, read_median, rand_median in rows:
        if kind == "seq_read" and read_median:
            per[name][SEQ_READ].append(Point(at, bw / 1e6 / read_median, recipe, run_id))
        elif kind == "rand_read" and rand_median:
            per[name][RAND_READ].append(Point(at, iops / rand_median, recipe, run_id))
    return [NodeSeries(n, pts) for n, pts in sorted(per.items())]


def thresholds(policy: Policy) -> dict[str, float]:
    """The slow line of each figure: the peer rules' gaps (verdict.min_peer_drop for the
    sequential read, rand_peer_drop for 4 KiB random reads)."""
    return {SEQ_READ: policy.verdict.min_peer_drop, RAND_READ: policy.verdict.rand_peer_drop}


def node_trends(
    store: Store,
    policy: Policy,
    now: datetime,
    nodes: Sequence[str] | None = None,
    horizon: timedelta | None = None,
) -> list[TrendVerdict]:
    """Every figure's trend verdict of each node (``nodes`` or all with sweeps within
    ``trend.since_days``), DECLINING first, then by node; a figure a node never had (a
    recipe without random reads) is left out."""
    tp = policy.trend
    reach = horizon if horizon is not None else timedelta(days=tp.horizon_days)
    lines = thresholds(policy)
    out = []
    for s in node_series(store, nodes, now - timedelta(days=tp.since_days)):
        for figure, points in s.points.items():
            if not points:
                continue
            out.append(
                declining(
                    s.node,
                    points,
                    lines[figure],
                    reach,
                    figure=figure,
                    min_sweeps=tp.min_sweeps,
                    window=max(tp.window, tp.min_sweeps),
                    confidence=tp.confidence,
                )
            )
    return sorted(out, key=lambda v: (v.status is not TrendStatus.DECLINING, v.node, v.figure))
