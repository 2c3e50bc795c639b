"""The nightly sweep's controller side: `screener sweep --submit` probes the idle nodes that
screener drained over SSH from the submitting host, which holds the key that reaches every
node. A drained node cannot run a job step, and the sweep job runs on a compute node that
holds no key (sweep/job.py), so this is the only sweep that reaches them.

Their own run (trigger ``sweep``, the sweep's mode stored with it), judged as a screen:
beside the fleet's recent figures (``verdict.fleet_window_h``; with ``--wait``, after the
job, beside tonight's). Then a node soft-drained for its check (sweep/due.py) is
resumed at once if it passed, or becomes an ordinary slow drain if slow; a node drained as
slow is resumed once it passed ``sweep.resume_after`` consecutive sweeps, if its reason is
still screener's. A dry run resumes nobody and records ``would_resume``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime

from screener import app
from screener.errors import StoreError
from screener.hooks import drains
from screener.hooks.drain_rules import may_resume
from screener.hostlist import fold_nodes
from screener.pipeline import ProbeLocks, ScreenResult, TransportProber
from screener.policy import Policy, database_url
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.slurm import SlurmClient, SlurmNode
from screener.store import Store, open_store
from screener.store.slurm_records import SlurmRecords
from screener.sweep.due import is_due, make_slow
from screener.sweep.mode import SweepMode
from screener.transport.base import Transport

Log = Callable[[str], None]
PART = "screener-drained idle nodes, probed over SSH by the submitting host"  # runs.policy


def screener_drained(
    every: Mapping[str, SlurmNode], recorded: Mapping[str, str | None], exclude: Collection[str]
) -> list[str]:
    """Idle drained nodes (not in ``exclude``) whose Slurm reason is exactly the one screener
    recorded (``recorded``: node -> its latest screener drain reason): ours to probe. Pure."""
    return sorted(
        name
        for name, node in every.items()
        if name not in exclude
        and node.idle_drained
        and recorded.get(name) is not None
        and recorded.get(name) == node.reason
    )


def drained_idle(
    every: Mapping[str, SlurmNode], records: SlurmRecords, exclude: Collection[str]
) -> list[str]:
    """The screener-drained idle nodes outside ``exclude`` (which ones are screener's is in
    the database)."""
    candidates = [n for n, node in every.items() if node.idle_drained and n not in exclude]
    recorded = {n: records.screener_reason(n) for n in candidates}
    return screener_drained(every, recorded, exclude)


def sweep_drained(
    policy: Policy, client: SlurmClient, mode: SweepMode, exclude: Collection[str], log: Log
) -> ScreenResult | None:
    """Probe, judge and resume the screener-drained idle nodes not in ``exclude`` (the nodes
    the sweep job holds); None when there are none or the database does not answer."""
    url = database_url(policy)
    try:
        store = open_store(url, upgrade=url.startswith("sqlite"))
    except StoreError as exc:
        if url.startswith("sqlite"):  # a local file: a path/permission mistake, not an outage
            raise
        log(f"database unavailable ({exc}): screener-drained nodes not probed")
        return None
    with store:
        return DrainedSweep(policy, client, mode, log).run(store, exclude)


class DrainedSweep:
    """One run over the screener-drained idle nodes, and the resumes it decides."""

    def __init__(self, policy: Policy, client: SlurmClient, mode: SweepMode, log: Log) -> None:
        self.policy = policy
        self.client = client
        self.mode = mode
        self.log = log
        self.dry_run = policy.slurm.dry_run or mode.dry_run

    def run(self, store: Store, exclude: Collection[str]) -> ScreenResult | None:
        """Pick the nodes, screen them over SSH with the screen's loop, then act."""
        records = SlurmRecords(store)
        every = {n.name: n for n in self.client.nodes()}
        drained = drained_idle(every, records, exclude)
        if not drained:
            self.log("no screener-drained idle node to probe")
            return None
        self.log(
            f"screener-drained idle nodes probed over SSH from this host: {fold_nodes(drained)}"
        )
        policy, deep = self.policy, self.mode.deep

        def prober(transport: Transport, locks: ProbeLocks | None) -> TransportProber:
            return TransportProber(transport, policy, locks=locks, deep=deep)

        async def after(_transport: Transport, result: ScreenResult) -> None:
            self._act(records, result)

        request = app.ScreenRequest(
            tuple(drained),
            policy,
            trigger=Trigger.SWEEP,
            store=store,
            after=after,
            prober=prober,
            run_info={"sweep_mode": self.mode.as_dict(), "sweep_part": PART},
        )
        return app.run_screen(request)

    def _act(self, records: SlurmRecords, result: ScreenResult) -> None:
        summary = result.summary
        for note in result.notes:  # planted names moved aside (screener.probe.private)
            self.log(note)
        for v in summary.verdicts:
            self.log(f"{v.node}: {v.status.value} {v.reason}")
        if result.store_error or result.run_id is None:
            self.log(f"{result.store_error or 'no run stored'}: nobody resumed this sweep")
            return
        for v in summary.verdicts:
            if not self._checked(records, result.run_id, v, summary):
                self._maybe_resume(records, result.run_id, v.node, v.status)

    def _checked(self, records: SlurmRecords, run_id: int, v: Verdict, summary: RunSummary) -> bool:
        """A node soft-drained for its check (sweep/due.py), probed now: resumed at
        once if it passed, an ordinary slow drain if slow. False for any other drain."""
        if not is_due(records.screener_reason(v.node), self.policy.slurm.tag):
            return False
        now = datetime.now(UTC)
        if v.status == Status.OK:
            current = self.client.nodes([v.node])  # the reason *now*, not at sweep start
            if current:
                why = "passed the check it was due"
                drains.resume_node(
                    current[0], self.client, records, now, run_id, why, self.dry_run, self.log
                )
        elif v.status in (Status.SLOW_READ, Status.SLOW_WRITE) and not self.dry_run:
            peers = summary.peer_read_median_mb_s
            make_slow(self.policy, self.client, records, v, peers, run_id, now, self.log)
        else:
            self.log(f"{v.node}: stays drained for its check ({v.status.value})")
        return True

    def _maybe_resume(self, records: SlurmRecords, run_id: int, node: str, status: Status) -> None:
        """Resume after ``resume_after`` consecutive passing sweeps (a dry run records
        ``would_resume``); a node still slow keeps (or reopens) its slow episode."""
        k = self.policy.sweep.resume_after
        if status != Status.OK:
            if status in (Status.SLOW_READ, Status.SLOW_WRITE):
                records.open_episode(node, Trigger.SWEEP, datetime.now(UTC), "still slow", run_id)
            self.log(f"{node}: stays drained ({status.value})")
            return
        passes = records.sweep_passes(node)
        if passes < k:
            self.log(f"{node}: passed {passes} of {k} sweeps; stays drained")
            return
        current = self.client.nodes([node])  # the reason *now*, not at sweep start
        if not current:
            return
        why = f"passed {passes} consecutive sweeps"
        now = datetime.now(UTC)
        dry = self.dry_run
        drains.resume_node(current[0], self.client, records, now, run_id, why, dry, self.log)
        recorded = records.screener_reason(node)
        if dry and may_resume(current[0], recorded)[0]:
            records.store.record_event(node, "would_resume", why, now, run_id, recorded)
