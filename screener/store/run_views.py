"""The admin read side about runs and episodes: ``screener flaky`` and ``screener show RUN``,
and the fleet-wide counts the exporter adds up. (Per-node views live in views.py, which
also re-exports these names, so ``views.flaky`` and ``views.run_detail`` keep working.)

Windows (``--since``) are range scans of indexed start times; the probe-duration counts
read only probes newer than the last id the exporter saw.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from statistics import median
from typing import Any

from sqlalchemy import case, func, select

from screener.errors import StoreError
from screener.probe_data import Status, Trigger
from screener.store.base import aware
from screener.store.query_rows import FlakyNodeRow, RunDetail, RunNodeRow, RunRow
from screener.store.reads import run_row
from screener.store.store import Store
from screener.store.tables import (
    EpisodeRecord,
    EventRecord,
    NodeProbeRecord,
    NodeRecord,
    RunRecord,
    VerdictRecord,
)


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
    with store.reading("find flaky nodes") as conn:
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
        sweep=by_trigger[Trigger.SWEEP.value] + by_trigger[Trigger.ROLLING.value],
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
    with store.reading(f"read run {run_id}") as conn:
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
    mode = sweep_mode(run.policy)
    return RunDetail(
        header, run.guard_reason, run.peer_read_median_mb_s, nodes, mode, rollout(run.policy)
    )


# runs.policy["prolog_probe"] (prolog/plan.py, Screen.run_info) -> what `screener run N` says
PROLOG_PROBES = {
    "triage": "prolog triage: the read jobs (the write too with triage_write) at [prolog] "
    "triage_ramp_s + triage_runtime_s",
    "second_look": "prolog second look: the triage's recipe again, at the nodes it passed"
    " reading unusually low, beside references",
    "escalated": "prolog full probe of the nodes its triage left ambiguous or held back, "
    "beside references",
}


def rollout(policy: Any) -> str | None:
    """How cautiously a run acted, from the policy stored with it: a whole-site dry run
    ([slurm] dry_run, or a sweep's --dry-run) and the rules in shadow ([verdict] shadow);
    None when every rule decided and drains were live."""
    if not isinstance(policy, dict):
        return None
    slurm, verdict, mode = (policy.get(k) for k in ("slurm", "verdict", "sweep_mode"))
    dry = any(isinstance(d, dict) and d.get("dry_run") for d in (slurm, mode))
    shadow = verdict.get("shadow") if isinstance(verdict, dict) else None
    parts = ["dry run: decided and recorded, nobody drained nor resumed"] if dry else []
    if isinstance(shadow, list) and shadow:
        names = ", ".join(str(n) for n in shadow)
        parts.append(f"shadow rules {names}: recorded ('would have drained'), never drain")
    return "; ".join(parts) or None


def sweep_mode(policy: Any) -> str | None:
    """The mode a sweep stored with its run (runs.policy["sweep_mode"]) as one phrase, or
    which probe a prolog ran (runs.policy["prolog_probe"]: triage, or the full probe of
    what a triage left ambiguous), or which learning read of a sweep it holds
    (runs.policy["sweep_learning"]); None for other runs and for runs stored before."""
    probe = policy.get("prolog_probe") if isinstance(policy, dict) else None
    if probe in PROLOG_PROBES:
        return PROLOG_PROBES[probe]
    learning = policy.get("sweep_learning") if isinstance(policy, dict) else None
    if isinstance(learning, str):  # sweep/learn.py
        return (
            f"{learning}: the prolog triage's recipe, each read kept with the sweep's full-probe"
            " decision as that recipe's history"
        )
    mode = policy.get("sweep_mode") if isinstance(policy, dict) else None
    if not isinstance(mode, dict):
        return None
    parts = [
        "dry run (nobody drained nor resumed)" if mode.get("dry_run") else "live",
        "deep" if mode.get("deep") else "one round per node",
        *(["rolling"] if mode.get("rolling") else []),
        f"config {mode['config']}" if mode.get("config") else "config: built-in defaults",
    ]
    return ", ".join(parts)


def counters(store: Store) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """Totals for the exporter: runs by (trigger, status), node events by action."""
    with store.reading("count runs and events") as conn:
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
    with store.reading("read probe durations") as conn:
        row = conn.execute(
            select(func.max(p.id), func.count(), func.sum(p.duration_s), *cols).where(
                p.id > after_id
            )
        ).one()
    if not row[1]:
        return after_id, [0] * len(bounds), 0, 0.0
    return int(row[0]), [int(c or 0) for c in row[3:]], int(row[1]), float(row[2] or 0.0)


def last_finished(store: Store) -> dict[tuple[str, str], datetime]:
    """When the newest finished run of each (trigger, status) ended: the exporter's
    ``screener_last_run_timestamp_seconds`` (did last night's sweep finish, or fail?)."""
    r = RunRecord
    with store.reading("read the last finished runs") as conn:
        rows = conn.execute(
            select(r.trigger, r.status, func.max(r.finished_at))
            .where(r.finished_at.is_not(None))
            .group_by(r.trigger, r.status)
        ).all()
    return {(t, s): aware(at, "finished_at") for t, s, at in rows if at is not None}


def run_walls(store: Store, trigger: Trigger, since: datetime) -> list[float]:
    """Wall seconds (finish - start) of the finished ``trigger`` runs started since
    ``since`` (a range scan of the start-time index)."""
    r = RunRecord
    with store.reading(f"read {trigger.value} run walls") as conn:
        rows = conn.execute(
            select(r.started_at, r.finished_at).where(
                r.trigger == trigger.value,
                r.started_at >= aware(since, "since"),
                r.finished_at.is_not(None),
            )
        ).all()
    return [(end - start).total_seconds() for start, end in rows if end is not None]


def sweep_reach(store: Store) -> tuple[datetime | None, dict[str, datetime]]:
    """When the first sweep started (None: never), and per node when its newest sweep
    verdict's run started: which nodes the sweeps reach, and how long ago. One grouped
    scan of the sweeps' verdicts (the sweep runs it once a night). A rolling job's verdict
    is a sweep verdict here: it checked the node the same way."""
    v, r = VerdictRecord, RunRecord
    sweeps = (Trigger.SWEEP.value, Trigger.ROLLING.value)
    with store.reading("read when the sweeps last reached each node") as conn:
        first = conn.scalar(select(func.min(r.started_at)).where(r.trigger.in_(sweeps)))
        rows = conn.execute(
            select(NodeRecord.name, func.max(v.started_at))
            .join(NodeRecord, NodeRecord.id == v.node_id)
            .join(r, r.id == v.run_id)
            .where(r.trigger.in_(sweeps))
            .group_by(NodeRecord.name)
        ).all()
    last = {name: aware(at, "started_at") for name, at in rows if at is not None}
    return (None if first is None else aware(first, "started_at")), last
