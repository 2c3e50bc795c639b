"""No node dodges its check forever ([sweep] max_age_h, off by default): a node that is
never idle is never held by a sweep, so after ``max_age_h`` without a sweep verdict (and
sweeps running that long) the sweep soft-drains it: ``DRAIN`` with its own reason ("TAG
due for its check: ..."), so running jobs finish and no new one starts. Once idle, the
next sweep's submitting host probes it over SSH as every screener-drained idle node
(sweep/drained.py); if it passes it is resumed at once (not after ``resume_after``
sweeps: it was never found slow); if it is slow its drain becomes an ordinary slow drain
(reason and episode), resumed by the usual rule. A dry run records ``would_drain``
instead. Never more than the partition guard's room (``partition_max_drain_fraction`` less
the drains within its window), oldest first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from screener.errors import SlurmError, StoreError
from screener.hooks.drain_rules import drain_reason
from screener.hooks.drains import Log
from screener.policy import Policy
from screener.probe_data import Trigger, Verdict
from screener.slurm.client import SlurmClient, SlurmNode
from screener.store.locks import actions_lock
from screener.store.run_views import sweep_reach
from screener.store.slurm_records import SlurmRecords

DUE = "due for its check"


def due_reason(tag: str, max_age_h: float) -> str:
    """The soft drain's reason: screener's tag, then what it is for."""
    return f"{tag} {DUE}: no sweep verdict in {max_age_h:g} h"


def is_due(reason: str | None, tag: str) -> bool:
    """Whether ``reason`` is a soft drain of this module (as Slurm or the store keep it)."""
    return reason is not None and reason.startswith(f"{tag} {DUE}")


def due_nodes(
    every: Mapping[str, SlurmNode],
    candidates: Sequence[str],
    first_sweep: datetime | None,
    last: Mapping[str, datetime],
    now: datetime,
    max_age_h: float,
) -> list[str]:
    """Of ``candidates``, the nodes with no sweep verdict for ``max_age_h`` (since the first
    sweep when never reached), running a job and not drained: oldest first. Pure."""
    if max_age_h <= 0 or first_sweep is None:
        return []
    limit = now - timedelta(hours=max_age_h)
    out = []
    for name in candidates:
        node = every.get(name)
        seen = last.get(name, first_sweep)
        if node is not None and node.busy and not node.drained and seen <= limit:
            out.append((seen, name))
    return [name for _, name in sorted(out)]


def room(policy: Policy, partition: int, recent: int) -> int:
    """How many more nodes the partition guard lets screener drain within its window."""
    return max(0, math.floor(policy.slurm.partition_max_drain_fraction * partition) - recent)


def drain_due(
    policy: Policy,
    client: SlurmClient,
    records: SlurmRecords,
    every: Mapping[str, SlurmNode],
    partition: Sequence[str],
    candidates: Sequence[str],
    run_id: int,
    now: datetime,
    dry_run: bool,
    log: Log,
) -> list[str]:
    """Soft-drain the due nodes among ``candidates`` (the nodes of ``partition`` the sweep
    did not hold), within the guard's room; the nodes drained (or that a dry run would)."""
    max_age = policy.sweep.max_age_h
    first, last = sweep_reach(records.store)
    due = due_nodes(every, candidates, first, last, now, max_age)
    if not due:
        return []
    since = now - timedelta(seconds=policy.slurm.partition_window_s)
    recent = records.drains_since(list(partition), since)
    allowed = room(policy, len(partition), len(recent))
    if len(due) > allowed:
        log(f"due for a check: {len(due)} nodes, the guard leaves room for {allowed}")
        due = due[:allowed]
    reason = due_reason(policy.slurm.tag, max_age)
    if dry_run:
        for node in due:
            log(f"dry-run: would soft-drain {node}: {reason}")
            records.store.record_event(node, "would_drain", "dry run", now, run_id, reason)
        return due
    return _drain(client, records, [(n, reason) for n in due], run_id, now, log, episode=False)


def make_slow(
    policy: Policy,
    client: SlurmClient,
    records: SlurmRecords,
    verdict: Verdict,
    peer_median: float | None,
    run_id: int,
    now: datetime,
    log: Log,
) -> bool:
    """A soft-drained node the sweep found slow: its drain becomes an ordinary slow drain
    (reason and episode), resumed by the usual ``resume_after`` rule."""
    reason = drain_reason(policy.slurm.tag, verdict, peer_median, run_id)
    drained = _drain(client, records, [(verdict.node, reason)], run_id, now, log, episode=True)
    return bool(drained)


def _drain(
    client: SlurmClient,
    records: SlurmRecords,
    pairs: Sequence[tuple[str, str]],
    run_id: int,
    now: datetime,
    log: Log,
    episode: bool,
) -> list[str]:
    """Two-phase drains (intent, scontrol, event) under the actions lock."""
    drained = []
    try:
        with actions_lock(records.store):
            for node, reason in pairs:
                records.intend_drain(node, reason, now, run_id)
                try:
                    client.drain([node], reason)
                except SlurmError as exc:
                    log(f"drain of {node} failed: {exc}")
                    records.store.record_event(node, "drain_failed", str(exc), now, run_id, reason)
                    continue
                records.record_drain(node, reason, now, run_id, Trigger.SWEEP, None, episode)
                log(f"drained {node}: {reason}")
                drained.append(node)
    except StoreError as exc:  # the lock or a record failed: the next run settles intents
        log(f"drains stopped: {exc}")
    return drained
