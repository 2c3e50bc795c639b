"""Early warning's shadow record read from the store (issue 46): each node's sweep series
(store/trend.py) and the statuses every later run gave it, scored by verdict/trend_score.py
for `screener accuracy --by rule` and bench/trend_lead.py. No schema change.

``decider`` gives a figure's verdict as node_trends does (the same scale, line, window and
function per figure; tests/test_trend_score.py holds the two to the same answers, sweep
by sweep, so a change to one that the other misses fails there)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import select

from screener.policy import Policy
from screener.probe_data import Status, Trigger
from screener.store.base import aware
from screener.store.store import Store
from screener.store.tables import NodeRecord, RunRecord, VerdictRecord
from screener.store.trend import decider as trend_decider
from screener.store.trend import node_series
from screener.verdict.trend_score import Decide, NodeScore, StatusAt, TrendRule, score_node

# Runs that screen a node (a job's own in-job run is another judgement, not a verdict)
SCREENS = (Trigger.SWEEP, Trigger.ROLLING, Trigger.PROLOG, Trigger.MANUAL)


def decider(policy: Policy, horizon: timedelta) -> Decide:
    """One figure's trend verdict from its points, as node_trends gives it (the same one)."""
    return trend_decider(policy, horizon)


def trend_rule(policy: Policy, horizon: timedelta | None = None) -> TrendRule:
    """The rule `screener trend` applies under ``policy`` (its horizon unless ``horizon``)."""
    reach = horizon if horizon is not None else timedelta(days=policy.trend.horizon_days)
    return TrendRule(decider(policy, reach), reach, timedelta(days=policy.trend.since_days))


def node_statuses(
    store: Store, nodes: Sequence[str] | None, since: datetime
) -> dict[str, list[StatusAt]]:
    """Every screening verdict of ``nodes`` (None: every node) since ``since``, oldest
    first, by node name: when its run started and the status."""
    start = aware(since, "since")
    query = (
        select(NodeRecord.name, RunRecord.started_at, VerdictRecord.status)
        .join(RunRecord, RunRecord.id == VerdictRecord.run_id)
        .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
        .where(
            RunRecord.trigger.in_([t.value for t in SCREENS]),
            RunRecord.started_at >= start,
        )
        .order_by(RunRecord.started_at, RunRecord.id)
    )
    if nodes is not None:
        query = query.where(NodeRecord.name.in_(list(nodes)))
    out: dict[str, list[StatusAt]] = defaultdict(list)
    with store.reading("read the nodes' verdicts") as conn:
        for name, at, status in conn.execute(query):
            out[name].append(StatusAt(at, Status(status)))
    return dict(out)


def trend_scores(
    store: Store,
    policy: Policy,
    since: datetime,
    now: datetime,
    horizon: timedelta | None = None,
    nodes: Sequence[str] | None = None,
) -> list[NodeScore]:
    """Each swept node's shadow record of the trend from ``since`` to ``now`` (sweeps and
    verdicts from ``trend.since_days`` earlier set each replay's fit and the node's state)."""
    rule = trend_rule(policy, horizon)
    back = aware(since, "since") - (rule.since or timedelta(0))
    series = {s.node: s.points for s in node_series(store, nodes, back)}
    seen = node_statuses(store, nodes, back)
    return [
        score_node(n, series.get(n, {}), seen.get(n, []), rule, now, start=since)
        for n in sorted(series)  # a node never swept is out of the trend's reach
    ]
