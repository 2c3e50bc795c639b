"""A small seeded fleet for the admin tests (queries, exporter, dashboards, HTML report).

Runs, probes and verdicts go through the Store API (the real write path); episodes and
node events, which the Slurm side writes, are plain SQLAlchemy inserts. All times are
relative to ``now`` so the windows (--since 30d, Grafana's last 7 days) cover them.

The story: nightly sweeps over node01..node08 for 5 nights, then a prolog run 2 hours ago.
- node03 reads slowly in the latest runs: an open sweep episode, drained by screener.
- node02 is flaky: three closed episodes (prolog, sweep, in-job), never drained.
- node06 had one episode, drained and resumed 40 minutes later (time to recovery 2400 s).
- node05 is unreachable in the last sweep (UNKNOWN); node07 had its drain stopped by the guard.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import insert, select
from store_data import error_probe, full_probe

from screener.probe_data import NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import Store
from screener.store.tables import EpisodeRecord, EventRecord, NodeRecord

NODES = [f"node{i:02d}" for i in range(1, 9)]
SLOW = "node03"
FLAKY = "node02"
RESUMED = "node06"
TTR_S = 2400.0
DRAIN_REASON = "screener: SLOW_READ 21 MB/s vs peers 3,000 MB/s (run {run})"


@dataclass
class Seeded:
    """Ids and times of what seed_fleet wrote, for the tests' assertions."""

    now: datetime
    sweeps: list[int]
    prolog: int

    @property
    def latest(self) -> int:
        return self.prolog


def _probe(node: str, status: Status, read_mb_s: float) -> NodeProbe:
    """The captured real probe, renamed, its iostat r_await raised for a slow reader."""
    if status is Status.UNKNOWN:
        return dataclasses.replace(error_probe(node), node=node)
    probe = full_probe(node)
    if status is Status.SLOW_READ:
        slow = tuple(
            dataclasses.replace(s, r_await_ms=800.0 + 10 * i, rkb_s=max(s.rkb_s, 1.0))
            for i, s in enumerate(probe.iostat)
        )
        probe = dataclasses.replace(probe, iostat=slow, duration_s=31.0)
    return probe


def _verdict(node: str, status: Status, read: float) -> Verdict:
    write = 3100.0
    return Verdict(
        node=node,
        status=status,
        reason="unreachable: connection refused"
        if status is Status.UNKNOWN
        else f"{node}: {status.value} read {read:,.0f} MB/s",
        read_mb_s=None if status is Status.UNKNOWN else read,
        write_mb_s=None if status is Status.UNKNOWN else write,
        ratio=None if status is Status.UNKNOWN else write / read,
        read_p99_ms=None if status is Status.UNKNOWN else (1500.0 if read < 100 else 2.1),
        z_read=None if status is Status.UNKNOWN else (-40.0 if read < 100 else 0.3),
        confirmed=status is Status.SLOW_READ,
        signals=("peer_read", "ratio") if status is Status.SLOW_READ else (),
    )


def _one_run(
    store: Store, trigger: Trigger, nodes: list[str], at: datetime, outcome: dict[str, Status]
) -> int:
    run = store.start_run(trigger, nodes, {"seeded": True}, None, "node[01-08]", at)
    verdicts = []
    for i, node in enumerate(nodes):
        status = outcome.get(node, Status.OK)
        read = 21.0 if status is Status.SLOW_READ else 2900.0 + 25 * i
        store.record_probe(run, _probe(node, status, read), 1)
        verdicts.append(_verdict(node, status, read))
    store.record_verdicts(run, RunSummary(tuple(verdicts), peer_read_median_mb_s=2990.0))
    store.finish_run(run, at + timedelta(minutes=2))
    return run


def seed_fleet(store: Store, now: datetime) -> Seeded:
    """Write the story above; returns the run ids."""
    sweeps = []
    for day in range(5, 0, -1):
        outcome = {SLOW: Status.SLOW_READ} if day <= 2 else {}
        if day == 1:
            outcome[NODES[4]] = Status.UNKNOWN
        sweeps.append(_one_run(store, Trigger.SWEEP, NODES, now - timedelta(days=day), outcome))
    prolog = _one_run(
        store, Trigger.PROLOG, NODES[:4], now - timedelta(hours=2), {SLOW: Status.SLOW_READ}
    )
    with store.engine.begin() as conn:
        ids = dict(conn.execute(select(NodeRecord.name, NodeRecord.id)).all())

        def episode(node: str, trig: Trigger, start: datetime, end: datetime | None) -> None:
            conn.execute(
                insert(EpisodeRecord).values(
                    node_id=ids[node],
                    trigger=trig.value,
                    started_at=start,
                    ended_at=end,
                    start_run_id=sweeps[0],
                    end_run_id=None if end is None else sweeps[1],
                    job_id="4242" if trig is Trigger.JOB else None,
                    reason=f"{node} slow read",
                )
            )

        def event(
            node: str, action: str, at: datetime, run: int | None, reason: str | None
        ) -> None:
            conn.execute(
                insert(EventRecord).values(
                    node_id=ids[node],
                    at=at,
                    action=action,
                    reason=f"{action} {node}",
                    run_id=run,
                    slurm_reason=reason,
                )
            )

        d = timedelta(days=1)
        for k, trig in enumerate((Trigger.PROLOG, Trigger.SWEEP, Trigger.JOB)):
            start = now - (6 - k) * d
            episode(FLAKY, trig, start, start + timedelta(hours=3 + k))
        episode(SLOW, Trigger.SWEEP, now - 2 * d, None)
        drained = now - 3 * d
        episode(RESUMED, Trigger.SWEEP, drained, drained + timedelta(seconds=TTR_S))
        event(RESUMED, "drain", drained, sweeps[2], DRAIN_REASON.format(run=sweeps[2]))
        event(RESUMED, "resume", drained + timedelta(seconds=TTR_S), sweeps[2], None)
        event(SLOW, "drain", now - 2 * d, sweeps[3], DRAIN_REASON.format(run=sweeps[3]))
        event("node07", "guard_trip", now - 4 * d, sweeps[1], None)
        event("node01", "drain_failed", now - 4 * d, sweeps[1], None)
    return Seeded(now=now, sweeps=sweeps, prolog=prolog)
