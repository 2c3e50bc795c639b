"""Early warning's read side (issue 46): each node's sweep figures against its round's
peers, per recipe, and the trend verdicts over them (screener.verdict.trend).

A point is a node's **round-1** probe in a sweep (nightly or rolling) that ran without
error, against the run's round-1 peers, so a shared slowdown moves the node and its peers
together and is no decline. Round 2 (a re-probe beside references, fewer nodes, faster) is
another yardstick and is left out. The figures:
- seq read, rand read: over ``runs.peer_read_median_mb_s`` / ``peer_rand_median_iops``
  (what the peer rules judged it against);
- read p99: the seq read's p99 over the median p99 of the run's round-1 seq reads;
- stall share: the seq read's share of reads >= 100 ms minus the run's round-1 median
  share, in percentage points, on sweeps whose median read is under 25 ms (as the
  slow_ios rule reads it);
- percentage used, media errors: the round-1 probe's SMART facts as read, where the node
  has them (a node without SMART has no such series).
The runs table keeps no p99 or share median: those are the median of the run's round-1
seq reads, one query for both (only when ``nodes`` leaves peers out; else from the same
rows). No schema change: every figure, fact and recipe fingerprint is already stored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

from sqlalchemy import select

from screener.policy import Policy
from screener.probe_data import Trigger
from screener.store.base import aware
from screener.store.store import Store
from screener.store.tables import (
    FactsRecord,
    NodeProbeRecord,
    NodeRecord,
    ProbeJobRecord,
    RunRecord,
)
from screener.verdict.rules import QUEUE_FACTOR, SLOW_IO_NS
from screener.verdict.trend import (
    Point,
    Scale,
    TrendStatus,
    TrendVerdict,
    counting,
    declining,
)

SWEEPS = (Trigger.SWEEP.value, Trigger.ROLLING.value)
SEQ_READ, RAND_READ = "seq read", "rand read"  # the figures fitted, as the words name them
READ_P99, STALL_SHARE = "read p99", "stall share"
PCT_USED, MEDIA_ERRORS = "percentage used", "media errors"  # SMART, where the node has it
PROBE_FIGURES = (SEQ_READ, RAND_READ, READ_P99, STALL_SHARE)
SMART_FIGURES = (PCT_USED, MEDIA_ERRORS)
SCALES = {
    SEQ_READ: Scale.FALLING,
    RAND_READ: Scale.FALLING,
    READ_P99: Scale.RISING,
    STALL_SHARE: Scale.SHARE,
    PCT_USED: Scale.COUNTER,
    MEDIA_ERRORS: Scale.COUNTER,
}
ENDURANCE_LINE = 100.0  # percentage used: the facts rule's line (verdict.rules.fact_problems)
POINTS = 100.0  # a share in percentage points
MEDIA_ERRORS_LINE = 1.0  # any media error is a problem fact (DEGRADED); a warning: any rise


@dataclass(frozen=True)
class NodeSeries:
    """One node's points per figure (oldest first, every recipe: the fit picks its own);
    every figure is a key, empty when the node has none (a SMART figure without SMART)."""

    node: str
    points: dict[str, list[Point]]


def node_series(store: Store, nodes: Sequence[str] | None, since: datetime) -> list[NodeSeries]:
    """Each node's (``nodes``, or every node with a sweep) points of every figure since
    ``since``, by node name; a node with none is left out."""
    start = aware(since, "since")
    np, job, run, fx = NodeProbeRecord, ProbeJobRecord, RunRecord, FactsRecord
    in_sweeps = (
        run.trigger.in_(SWEEPS),
        run.started_at >= start,
        np.round == 1,
    )
    jobs = (np.error.is_(None), job.error == 0)
    when = select(run.id, run.started_at).where(*in_sweeps[:2])
    query = (
        select(
            NodeRecord.name,
            run.id,
            np.recipe,
            job.kind,
            job.bw_bytes,
            job.iops,
            run.peer_read_median_mb_s,
            run.peer_rand_median_iops,
            job.lat_p99_ns,
            job.lat_p50_ns,
            job.slow_fraction,
        )
        .join(np, np.run_id == run.id)
        .join(NodeRecord, NodeRecord.id == np.node_id)
        .join(job, job.node_probe_id == np.id)
        .where(*in_sweeps, *jobs, job.kind.in_(("seq_read", "rand_read")))
        .order_by(NodeRecord.name, run.started_at, run.id)
    )
    smart = (
        select(
            NodeRecord.name,
            run.id,
            np.recipe,
            fx.smart_percentage_used,
            fx.smart_media_errors,
        )
        .join(np, np.run_id == run.id)
        .join(NodeRecord, NodeRecord.id == np.node_id)
        .join(fx, fx.node_probe_id == np.id)
        .where(*in_sweeps)
        .where((fx.smart_percentage_used.is_not(None)) | (fx.smart_media_errors.is_not(None)))
        .order_by(NodeRecord.name, run.started_at, run.id)
    )
    peers = (  # every round-1 seq read of the runs: the p99 and slow-share medians
        select(run.id, job.lat_p99_ns, job.slow_fraction)
        .join(np, np.run_id == run.id)
        .join(job, job.node_probe_id == np.id)
        .where(*in_sweeps, *jobs, job.kind == "seq_read")
    )
    if nodes is not None:
        names = list(nodes)
        query = query.where(NodeRecord.name.in_(names))
        smart = smart.where(NodeRecord.name.in_(names))
    with store.reading("read the nodes' sweep figures") as conn:
        started: dict[int, datetime] = {r[0]: r[1] for r in conn.execute(when)}  # once a run
        rows = conn.execute(query).all()
        facts = conn.execute(smart).all()
        if nodes is None:  # every node's seq read is in ``rows``: no second read
            seq = [(r[1], r[8], r[10]) for r in rows if r[3] == "seq_read"]
        elif rows:  # the peers of the asked nodes' runs
            theirs = peers.where(run.id.in_(sorted({r[1] for r in rows})))
            seq = [(r[0], r[1], r[2]) for r in conn.execute(theirs).all()]
        else:
            seq = []
    p99s: dict[int, list[float]] = defaultdict(list)
    shares: dict[int, list[float]] = defaultdict(list)
    for run_id, p99, share in seq:
        p99s[run_id].append(p99)
        shares[run_id].append(share)
    p99_median = {r: median(v) for r, v in p99s.items()}
    share_median = {r: median(v) for r, v in shares.items()}
    figures = (*PROBE_FIGURES, *SMART_FIGURES)
    per: dict[str, dict[str, list[Point]]] = defaultdict(lambda: {f: [] for f in figures})
    for name, run_id, recipe, kind, bw, iops, read_median, rand_median, p99, p50, slow in rows:
        mine, at = per[name], started[run_id]
        if kind == "rand_read":
            if rand_median:
                mine[RAND_READ].append(Point(at, iops / rand_median, recipe, run_id))
            continue
        if read_median:
            mine[SEQ_READ].append(Point(at, bw / 1e6 / read_median, recipe, run_id))
        if p99 > 0 and p99_median.get(run_id, 0) > 0:
            mine[READ_P99].append(Point(at, p99 / p99_median[run_id], recipe, run_id))
        if p50 * QUEUE_FACTOR < SLOW_IO_NS and run_id in share_median:  # else it is queueing
            excess = (slow - share_median[run_id]) * POINTS
            mine[STALL_SHARE].append(Point(at, excess, recipe, run_id))
    for name, run_id, recipe, used, errors in facts:
        mine, at = per[name], started[run_id]
        if used is not None:
            mine[PCT_USED].append(Point(at, float(used), recipe, run_id))
        if errors is not None:
            mine[MEDIA_ERRORS].append(Point(at, float(errors), recipe, run_id))
    return [NodeSeries(n, pts) for n, pts in sorted(per.items())]


def thresholds(policy: Policy) -> dict[str, float]:
    """The line of each figure, the rules': the peer rules' gaps (verdict.min_peer_drop for
    the sequential read, rand_peer_drop for 4 KiB random reads), the tail rule's
    tail_min_factor (read p99), the slow_ios rule's max_slow_fraction (stall share, in
    points: 0.05 is 5), and
    the facts rule's endurance 100 % and first media error."""
    v = policy.verdict
    return {
        SEQ_READ: v.min_peer_drop,
        RAND_READ: v.rand_peer_drop,
        READ_P99: v.tail_min_factor,
        STALL_SHARE: v.max_slow_fraction * POINTS,
        PCT_USED: ENDURANCE_LINE,
        MEDIA_ERRORS: MEDIA_ERRORS_LINE,
    }


def decider(
    policy: Policy, horizon: timedelta
) -> Callable[[str, str, Sequence[Point]], TrendVerdict]:
    """One figure's trend verdict from its points (node, figure, points), as node_trends
    gives it: the figure's scale and line, [trend]'s window, sweeps and confidence."""
    tp = policy.trend
    lines = thresholds(policy)
    window = max(tp.window, tp.min_sweeps)

    def decide(node: str, figure: str, points: Sequence[Point]) -> TrendVerdict:
        scale = SCALES[figure]
        if scale is Scale.COUNTER:
            return counting(
                node,
                points,
                lines[figure],
                horizon,
                figure=figure,
                unit_text="%" if figure == PCT_USED else "",
                min_sweeps=tp.min_sweeps,
                window=window,
                any_rise=figure == MEDIA_ERRORS,
            )
        return declining(
            node,
            points,
            lines[figure],
            horizon,
            figure=figure,
            min_sweeps=tp.min_sweeps,
            window=window,
            confidence=tp.confidence,
            scale=scale,
        )

    return decide


def node_trends(
    store: Store,
    policy: Policy,
    now: datetime,
    nodes: Sequence[str] | None = None,
    horizon: timedelta | None = None,
) -> list[TrendVerdict]:
    """Every figure's trend verdict of each node (``nodes`` or all with sweeps within
    ``trend.since_days``), DECLINING first, then by node; a figure a node never had (a
    recipe without random reads, a drive without SMART) is left out."""
    tp = policy.trend
    decide = decider(policy, horizon if horizon is not None else timedelta(days=tp.horizon_days))
    out = [
        decide(s.node, figure, points)
        for s in node_series(store, nodes, now - timedelta(days=tp.since_days))
        for figure, points in s.points.items()
        if points
    ]
    return sorted(out, key=lambda v: (v.status is not TrendStatus.DECLINING, v.node, v.figure))
