"""The Store: record runs, probes, verdicts and node events (writes here; reads in reads.py,
admin views in views.py, opening and schema checks in opening.py).

Each write is one short transaction (a probe is all stored or not at all); every database
failure surfaces as one StoreError line."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    insert,
    select,
    update,
)

from screener.errors import StoreError
from screener.probe_data import NodeProbe, RunSummary, Trigger
from screener.store import convert
from screener.store.base import (
    JOB_ID_MAX,
    aware,
    ensure_nodes,
    new_id,
    positive,
    record_run_outcome,
    run_started,
)
from screener.store.engine import (
    screener_version,
)
from screener.store.reads import StoreReads
from screener.store.tables import (
    DRY_RUN_ACTIONS,
    EVENT_ACTIONS,
    INTENT_ACTIONS,
    RUN_STATUSES,
    SCREEN_ACTIONS,
    EventRecord,
    FactsRecord,
    IostatRecord,
    NodeProbeRecord,
    ProbeJobRecord,
    RunRecord,
    VerdictRecord,
)

__all__ = ["JOB_ID_MAX", "Store"]


class Store(StoreReads):
    """Results database: the reads of StoreReads plus the writes of a screening run."""

    def start_run(
        self,
        trigger: Trigger,
        nodes: Sequence[str],
        policy: Mapping[str, Any],
        job_id: str | None,
        nodeset: str,
        started_at: datetime,
    ) -> int:
        """Open a run (status "running") over ``nodes``; returns its id."""
        try:
            trig = Trigger(trigger)
        except ValueError:
            raise StoreError(f"unknown trigger {trigger!r}") from None
        names = [convert.node_name(n) for n in nodes]
        at = aware(started_at, "started_at")
        if job_id is not None and not 0 < len(job_id) <= JOB_ID_MAX:
            raise StoreError(f"job id must be 1..{JOB_ID_MAX} characters, got {job_id!r}")
        with self.writing("start a run") as conn:
            ensure_nodes(conn, names, at, touch=True)
            result = conn.execute(
                insert(RunRecord).values(
                    trigger=trig.value,
                    job_id=job_id,
                    nodeset=nodeset,
                    node_count=len(set(names)),
                    policy=dict(policy),
                    started_at=at,
                    status="running",
                    shared_cause=False,
                    shared_cause_reason="",
                    screener_version=screener_version(),
                )
            )
            return new_id(result)

    def record_probe(self, run_id: int, probe: NodeProbe, round_no: int) -> None:
        """Store one node's probe round: fio jobs, iostat samples, facts, raw output, error."""
        name = convert.node_name(probe.node)
        positive(round_no, "round")
        head = convert.probe_row(probe)
        jobs = convert.job_rows(probe)
        samples = convert.iostat_rows(probe)
        facts = None if probe.facts is None else convert.facts_row(probe.facts)
        with self.writing(f"record the probe of {name} (run {run_id}, round {round_no})") as conn:
            started = run_started(conn, run_id)
            node_id = ensure_nodes(conn, [name], started, touch=True)[name]
            probe_id = new_id(
                conn.execute(
                    insert(NodeProbeRecord).values(
                        run_id=run_id, node_id=node_id, round=round_no, **head
                    )
                )
            )
            for table, rows in ((ProbeJobRecord, jobs), (IostatRecord, samples)):
                if rows:  # one executemany per table, not one round trip per row
                    conn.execute(insert(table), [{"node_probe_id": probe_id, **r} for r in rows])
            if facts is not None:
                conn.execute(insert(FactsRecord).values(node_probe_id=probe_id, **facts))

    def record_verdicts(self, run_id: int, summary: RunSummary) -> None:
        """Store the final verdict of every node and the run's fleet-level flags."""
        names = [convert.node_name(v.node) for v in summary.verdicts]
        rows = [convert.verdict_row(v) for v in summary.verdicts]
        with self.writing(f"record the verdicts of run {run_id}") as conn:
            started = run_started(conn, run_id)
            done = conn.execute(select(VerdictRecord.id).where(VerdictRecord.run_id == run_id))
            if done.first() is not None:
                raise StoreError(f"verdicts of run {run_id} are already recorded")
            ids = ensure_nodes(conn, names, started, touch=True)
            if rows:
                conn.execute(
                    insert(VerdictRecord),
                    [
                        {"run_id": run_id, "node_id": ids[n], "started_at": started, **r}
                        for n, r in zip(names, rows, strict=True)
                    ],
                )
            record_run_outcome(conn, run_id, summary)

    def finish_run(self, run_id: int, finished_at: datetime, status: str = "done") -> None:
        """Close a run with its final status (done or failed)."""
        if status not in RUN_STATUSES:
            raise StoreError(f"run status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        at = aware(finished_at, "finished_at")
        with self.writing(f"finish run {run_id}") as conn:
            result = conn.execute(
                update(RunRecord)
                .where(RunRecord.id == run_id)
                .values(finished_at=at, status=status)
            )
            if result.rowcount == 0:
                raise StoreError(f"run {run_id} does not exist")

    def record_event(
        self,
        node: str,
        action: str,
        reason: str,
        at: datetime,
        run_id: int | None = None,
        slurm_reason: str | None = None,
        job_id: str | None = None,
    ) -> None:
        """Log a drain, resume, or flaky-episode boundary for ``node``."""
        name = convert.node_name(node)
        actions = EVENT_ACTIONS + INTENT_ACTIONS + SCREEN_ACTIONS + DRY_RUN_ACTIONS
        if action not in actions:
            known = ", ".join(actions)
            raise StoreError(f"event action must be one of {known}")
        when = aware(at, "at")
        with self.writing(f"record the {action} event of {name}") as conn:
            if run_id is not None:
                run_started(conn, run_id)
            node_id = ensure_nodes(conn, [name], when, touch=False)[name]
            insert_event(conn, node_id, when, action, reason, run_id, slurm_reason, job_id)


def insert_event(
    conn: Connection,
    node_id: int,
    at: datetime,
    action: str,
    reason: str,
    run_id: int | None,
    slurm_reason: str | None,
    job_id: str | None,
) -> None:
    """One node_events row (record_event's, and the spool replay's once it found none alike)."""
    conn.execute(
        insert(EventRecord).values(
            node_id=node_id,
            at=at,
            action=action,
            reason=reason,
            run_id=run_id,
            slurm_reason=slurm_reason,
            job_id=job_id,
        )
    )
