"""Side effects shared by the prolog, the sweep and `screener resume`: drain with the guard,
resume with the reason check, each recorded as a node event."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from screener.errors import SlurmError, StoreError
from screener.hooks.decide import DrainPlan, drain_reason, drainable, may_resume, plan_drains
from screener.model import RunSummary, Trigger
from screener.policy import Policy
from screener.slurm.model import SlurmClient, SlurmNode
from screener.store.slurm_records import SlurmRecords

Log = Callable[[str], None]


def decide_drains(
    summary: RunSummary,
    run_id: int | None,
    allocation: int,
    partition_nodes: Sequence[str],
    records: SlurmRecords | None,
    policy: Policy,
    now: datetime,
) -> DrainPlan:
    """The drain plan for a run: drainable verdicts, reasons, then the mass-drain guard."""
    slow = [
        (v.node, drain_reason(policy.slurm.tag, v, summary.peer_read_median_mb_s, run_id))
        for v in drainable(summary, policy.verdict.confirm)
    ]
    recent = 0
    if slow and records is not None and partition_nodes:
        since = now - timedelta(seconds=policy.slurm.partition_window_s)
        recent = len(records.drains_since(partition_nodes, since))
    return plan_drains(slow, allocation, len(partition_nodes), recent, policy.slurm)


def apply_drains(
    plan: DrainPlan,
    client: SlurmClient,
    records: SlurmRecords | None,
    run_id: int | None,
    trigger: Trigger,
    job_id: str | None,
    now: datetime,
    dry_run: bool,
    log: Log,
) -> list[str]:
    """Carry out ``plan``; returns the nodes actually drained. Every outcome is an event."""
    store = records.store if records is not None else None
    if plan.guard is not None:
        log(plan.guard)
        if records is not None and store is not None:
            if run_id is not None:
                records.set_guard_reason(run_id, plan.guard)
            for node in plan.blocked:
                store.record_event(node, "guard_trip", plan.guard, now, run_id)
        return []
    drained: list[str] = []
    for node, reason in plan.drain:
        if dry_run:
            log(f"dry-run: would drain {node} with reason {reason!r}")
            continue
        try:
            client.drain([node], reason)
        except SlurmError as exc:
            log(f"drain of {node} failed: {exc}")
            if store is not None:
                store.record_event(node, "drain_failed", str(exc), now, run_id, reason)
            continue
        drained.append(node)
        log(f"drained {node}: {reason}")
        if records is not None and store is not None:
            store.record_event(node, "drain", reason, now, run_id, reason)
            records.open_episode(node, trigger, now, reason, run_id, job_id)
    return drained


def resume_node(
    node: SlurmNode,
    client: SlurmClient,
    records: SlurmRecords,
    now: datetime,
    run_id: int | None,
    why: str,
    dry_run: bool,
    log: Log,
) -> bool:
    """Resume ``node`` only if its current Slurm reason is exactly the one screener set."""
    recorded = records.screener_reason(node.name)
    ok, because = may_resume(node, recorded)
    if not ok:
        log(f"not resuming {because}")
        if recorded is not None:  # ours once, changed since: say so in the history
            records.store.record_event(node.name, "resume_refused", because, now, run_id)
        return False
    if dry_run:
        log(f"dry-run: would resume {node.name} ({why})")
        return False
    client.resume([node.name])
    records.store.record_event(node.name, "resume", why, now, run_id, recorded)
    records.close_episodes([node.name], now, run_id)
    log(f"resumed {node.name}: {why}")
    return True


def close_passing(
    summary: RunSummary, records: SlurmRecords | None, now: datetime, run_id: int | None
) -> None:
    """A node that passed ends its open slow episode (it is not resumed here: the sweep does)."""
    if records is None:
        return
    ok = [v.node for v in summary.verdicts if v.status.value == "OK"]
    with contextlib.suppress(StoreError):  # bookkeeping; the verdicts are already stored
        records.close_episodes(ok, now, run_id)
