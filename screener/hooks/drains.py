"""Side effects shared by the prolog, the sweep and `screener resume`: drain with the guard,
resume with the reason check, each recorded as a node event.

Safe under kills and concurrency (issue 11): a drain is two-phase (a "drain_pending" intent
with the exact reason before ``scontrol``, "drain" after), so a drain is recorded iff it was
issued once the next run has called finish_pending; drains, resumes and the settling of
intents run under the DB-wide actions lock (screener.store.locks), so two runs never
drain or resume the same node twice, nor settle an intent another run is carrying out.

With the database down (issue 45) the prolog still drains a confirmed slow node
(``drain_in_outage``): the partition guard counts screener's drains from Slurm's own tagged
reasons (drain_rules.tagged_drains), a flock in the spool directory stands in for the
actions lock (the hooks run on the controller's host), and the two phases go to the run's
spool file (screener.spool.SpooledDrains), replayed into the store later."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from screener.errors import SlurmError, StoreError
from screener.hooks.drain_rules import (
    DrainPlan,
    absolved,
    drain_reason,
    drainable,
    far_below,
    may_resume,
    plan_drains,
    settle_intent,
    small_allocation,
    tagged_drains,
)
from screener.hooks.fleet_guard import DIRECTIONS, FleetFigures, FleetView, fleet_view
from screener.hostlist import fold_nodes
from screener.policy import Policy
from screener.probe_data import RunSummary, Status, Trigger
from screener.slurm.client import SlurmClient, SlurmNode
from screener.store.history import history_window
from screener.store.locks import ACTIONS_WAIT_S, actions_lock
from screener.store.slurm_records import SlurmRecords

Log = Callable[[str], None]


@contextlib.contextmanager
def acting(records: SlurmRecords | None, wait_s: float = ACTIONS_WAIT_S) -> Iterator[None]:
    """The actions lock around a run's decide_drains + apply_drains, so the partition guard
    counts the drains of concurrent runs (re-entrant: apply_drains takes it again for free).
    Nothing to lock without records. StoreError when another run held it over ``wait_s``."""
    if records is None:
        yield
        return
    with actions_lock(records.store, wait_s):
        yield


def decide_drains(
    summary: RunSummary,
    run_id: int | None,
    allocation: int,
    partition_nodes: Sequence[str],
    records: SlurmRecords | None,
    policy: Policy,
    now: datetime,
    allocated: Sequence[str] = (),
    recent: Set[str] | None = None,
) -> DrainPlan:
    """The drain plan for a run: drainable verdicts, reasons, then the mass-drain guard over
    the distinct partition nodes screener drained within the window (``recent`` when the
    caller counted them, else the store's); a shared cause and the nodes it absolved ride
    along so apply_drains records them. A small allocation (``allocated``, fewer than
    ``guard_min_allocation``) is judged on the fleet's figures (the store's: without one,
    on the allocation's fraction like any other)."""
    verdicts = drainable(summary, policy.verdict.confirm)
    slow = [
        (v.node, drain_reason(policy.slurm.tag, v, summary.peer_read_median_mb_s, run_id))
        for v in verdicts
    ]
    directions = {v.node: "write" if v.status == Status.SLOW_WRITE else "read" for v in verdicts}
    counted: Set[str] = recent if recent is not None else set()
    fleet = None
    if slow and records is not None and partition_nodes:
        since = now - timedelta(seconds=policy.slurm.partition_window_s)
        if recent is None:
            counted = records.drains_since(partition_nodes, since)
        if allocated and small_allocation(len(allocated), policy.slurm):
            fleet = _fleet(records, partition_nodes, policy, now)
    apart = far_below(verdicts, policy.verdict.shared_outlier_factor)
    plan = plan_drains(
        slow,
        allocation,
        len(partition_nodes),
        counted,
        policy.slurm,
        fleet,
        allocated,
        directions,
        apart,
    )
    if not summary.shared_cause:
        return plan
    return replace(
        plan,
        shared_cause=summary.shared_cause_reason or "shared cause",
        absolved=tuple(absolved(summary)),
    )


def _fleet(
    records: SlurmRecords, partition_nodes: Sequence[str], policy: Policy, now: datetime
) -> FleetView:
    """The partition's figures of the last ``fleet_window_s`` against its baselines (of runs
    other than each node's newest: a burst's own figures are never their own yardstick); with
    no baseline in the partition, against each other's (same recipe; fleet_guard.py)."""
    window = policy.slurm.fleet_window_s
    newest = records.newest_figures(partition_nodes, now - timedelta(seconds=window))
    recipe, since = history_window(policy, now)
    usual = records.usual_figures(
        partition_nodes,
        policy.verdict.history_runs,
        recipe,
        since,
        skip_runs={n: f.run_id for n, f in newest.items()},
    )
    now_figures = {
        d: {n: f.figures[d] for n, f in newest.items() if d in f.figures} for d in DIRECTIONS
    }
    recipes = {n: f.recipe for n, f in newest.items()}
    figures = FleetFigures(now_figures, usual, window, recipes)
    return fleet_view(figures, policy.verdict.history_drop)


def await_fleet(
    records: SlurmRecords,
    partition_nodes: Sequence[str],
    run_id: int | None,
    policy: Policy,
    now: datetime,
    wait_s: float,
    log: Log,
) -> None:
    """Before a small allocation is judged on the fleet: wait (at most ``wait_s``) until the
    runs in progress on the partition's nodes stored their first round, so a burst of
    prologs weighs each other's figures, not the healthy ones from before. Not under the
    actions lock: those runs need it to start. A store error ends the wait."""
    since = now - timedelta(seconds=policy.slurm.fleet_window_s)
    deadline = time.monotonic() + wait_s
    try:
        while pending := records.unprobed_in_flight(partition_nodes, since, run_id):
            if time.monotonic() >= deadline:
                log(
                    f"fleet: {fold_nodes(pending)} still being probed after {wait_s:.1f}s: "
                    "judged without their figures"
                )
                return
            time.sleep(0.2)  # polling the store: the other runs write there, not to us
    except StoreError as exc:
        log(f"fleet: runs in progress not read ({exc}): judged without their figures")


@dataclass(frozen=True)
class DrainContext:
    """Who acts on a drain plan, for which run, and how: what every drain, event and record
    of apply_drains carries. ``records`` None: no store (nothing locked, recorded or
    settled); ``run_id`` None: the drain belongs to no screen run (the epilog's ingest)."""

    client: SlurmClient
    records: SlurmRecords | None
    run_id: int | None
    trigger: Trigger
    job_id: str | None
    now: datetime
    dry_run: bool
    log: Log


def apply_drains(plan: DrainPlan, ctx: DrainContext) -> list[str]:
    """Carry out ``plan``; returns the nodes actually drained. Every outcome is an event.

    With records: under the actions lock, earlier runs' pending intents are settled first,
    then each drain is intent -> scontrol -> "drain" (or "drain_failed"). A node Slurm shows
    drained with the reason screener recorded (another run drained it meanwhile) is left
    alone; no lock or no intent recorded means no drain.
    """
    records = ctx.records
    if records is None:
        return _drain_all(plan, ctx)
    try:
        with actions_lock(records.store):
            if not ctx.dry_run:
                finish_pending(ctx.client, records, ctx.now, ctx.log)
            return _drain_all(plan, ctx)
    except StoreError as exc:  # the lock (or a read under it) failed: act on nothing
        ctx.log(f"no drains: {exc}")
        return []


def _drain_all(plan: DrainPlan, ctx: DrainContext) -> list[str]:
    client, records, run_id, now, log = ctx.client, ctx.records, ctx.run_id, ctx.now, ctx.log
    store = records.store if records is not None else None
    if plan.basis:
        log(plan.basis)
    _record_shared_cause(plan, records, run_id, now, log)
    if plan.guard is not None:
        log(plan.guard)
        if records is not None and store is not None:
            if run_id is not None:
                records.set_guard_reason(run_id, _guard_reason(plan))
            for node in plan.blocked:
                store.record_event(node, "guard_trip", plan.guard, now, run_id)
        if not plan.drain:
            return []
        # else the guard held back the others and lets a node far below them be drained
    drained: list[str] = []
    others = _drained_by_screener(client, records, [n for n, _ in plan.drain]) if records else {}
    for node, reason in plan.drain:
        if ctx.dry_run:  # what a live run would have done, on record
            log(f"dry-run: would drain {node} with reason {reason!r}")
            if store is not None:
                try:
                    store.record_event(node, "would_drain", "dry run", now, run_id, reason)
                except StoreError as exc:
                    log(f"would_drain of {node} not recorded ({exc})")
            continue
        if node in others:
            log(f"{node}: already drained by screener ({others[node]!r}); not drained again")
            continue
        if records is not None:
            try:
                records.intend_drain(node, reason, now, run_id)  # phase 1
            except StoreError as exc:
                log(f"not draining {node}: cannot record the intent first ({exc})")
                continue
        try:
            client.drain([node], reason)
        except SlurmError as exc:
            log(f"drain of {node} failed: {exc}")
            if store is not None:  # unrecorded, the intent is settled "abandoned" later
                with contextlib.suppress(StoreError):
                    store.record_event(node, "drain_failed", str(exc), now, run_id, reason)
            continue
        drained.append(node)
        log(f"drained {node}: {reason}")
        if records is not None:
            try:
                records.record_drain(node, reason, now, run_id, ctx.trigger, ctx.job_id)  # phase 2
            except StoreError as exc:  # the intent stays: the next run records the drain
                log(f"drain of {node} not recorded yet ({exc}); the next run settles it")
    return drained


def _shared(plan: DrainPlan) -> str:
    """The run's shared-cause reason, saying "shared cause" once (verdict/judge.py's already do)."""
    why = plan.shared_cause or ""
    return why if "shared cause" in why else f"shared cause: {why}"


def _guard_reason(plan: DrainPlan) -> str:
    """``runs.guard_reason``: the guard's line, and the run's shared cause if it found one."""
    parts = [plan.guard] if plan.guard else []
    return "; ".join(parts + ([_shared(plan)] if plan.shared_cause else []))


def _record_shared_cause(
    plan: DrainPlan, records: SlurmRecords | None, run_id: int | None, now: datetime, log: Log
) -> None:
    """A shared cause is the alert: logged, in ``runs.guard_reason``, and a ``guard_trip``
    event for each slow node it absolved (none of them is drained; outliers within it are)."""
    if plan.shared_cause is None:
        return
    why = f"{_shared(plan)}: not blamed, not drained"
    who = fold_nodes(plan.absolved) if plan.absolved else "no node"
    log(f"{_shared(plan)}: {who} not blamed, not drained")
    if records is None:
        return
    try:  # bookkeeping: a failure here must not keep an outlier within it from its drain
        if run_id is not None and plan.guard is None:  # with a guard, its branch writes both
            records.set_guard_reason(run_id, _guard_reason(plan))
        for node in plan.absolved:
            records.store.record_event(node, "guard_trip", why, now, run_id)
    except StoreError as exc:
        log(f"shared cause not recorded: {exc}")


def _drained_by_screener(
    client: SlurmClient, records: SlurmRecords, nodes: Sequence[str]
) -> dict[str, str]:
    """Nodes Slurm shows drained with the reason screener recorded (another run drained them
    since this one read Slurm): node -> reason. Slurm is asked only about nodes with such a
    record; if it cannot answer, none are skipped (the drain then fails or repeats ours)."""
    ours = {n: r for n in nodes if (r := records.screener_reason(n)) is not None}
    if not ours:
        return {}
    try:
        current = client.nodes(list(ours))
    except SlurmError:
        return {}
    return {n.name: n.reason for n in current if n.drained and n.reason == ours.get(n.name)}


def finish_pending(
    client: SlurmClient,
    records: SlurmRecords,
    now: datetime,
    log: Log,
    nodes: Sequence[str] | None = None,
    current: Mapping[str, SlurmNode] | None = None,
    wait_s: float = ACTIONS_WAIT_S,
) -> list[tuple[str, bool]]:
    """Settle drain intents left by killed runs (of ``nodes``, or all): "drain" + episode when
    Slurm shows exactly the intended reason, else "drain_abandoned". ``current`` is Slurm's
    view when the caller has it fresh; otherwise it is read now. Returns (node, drained).

    Holds the actions lock (re-entrant, waiting at most ``wait_s``), so no live run's intent
    is mistaken for a dead one; but only when a first look, without it, finds an intent
    pending. A killed run's intent is committed before that look, so it cannot be missed,
    and the usual case (none) costs every prolog one query on its one connection instead of
    the lock's connection plus a second one: 32 prologs at once on a server with 4 free
    connections queued on the lock for 45 s, each holder waiting for its second connection.
    A Slurm that cannot be read leaves the intents for a later run.
    """
    if not records.pending_drains(nodes):
        return []
    with actions_lock(records.store, wait_s):
        pending = records.pending_drains(nodes)
        if not pending:
            return []
        if current is None:
            try:
                current = {n.name: n for n in client.nodes([p.node for p in pending])}
            except SlurmError as exc:
                log(f"drain intents of killed runs left pending: {exc}")
                return []
        out = []
        for p in pending:
            issued, why = settle_intent(p.reason, current.get(p.node))
            records.settle_drain(p, issued, why, now)
            log(f"{p.node}: intent of run {p.run_id} settled: {why}")
            out.append((p.node, issued))
        return out


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
    """Resume ``node`` only if its current Slurm reason is exactly the one screener set.

    Under the actions lock, after settling the node's pending drain intent (a drain whose
    run was killed before recording it is resumable once settled); ``node`` must be Slurm's
    view read just before the call."""
    with actions_lock(records.store):
        # Slurm is re-read if an intent is pending: ``node`` predates the lock, and a run
        # killed while holding it may have drained the node after that read.
        if not dry_run and finish_pending(client, records, now, log, [node.name]):
            with contextlib.suppress(SlurmError):  # judge on the view just used
                node = next(iter(client.nodes([node.name])), node)
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


# ---- the database is down (issue 45) ------------------------------------------------------
OUTAGE_LOCK = "outage-actions.lock"  # in the spool directory: the actions lock's stand-in


class DrainJournal(Protocol):
    """Where drains made without a database are recorded first (screener.spool.SpooledDrains):
    each method raises OSError when it cannot write."""

    def intend(self, node: str, reason: str) -> None: ...
    def drained(self, node: str, reason: str) -> None: ...
    def failed(self, node: str, reason: str, why: str) -> None: ...
    def guard(self, line: str, blocked: Sequence[str]) -> None: ...


@dataclass(frozen=True)
class Outage:
    """What a run acting without its database acts through: Slurm (``partition`` reads the
    partition's nodes, under the lock), the journal, the spool directory for the lock."""

    client: SlurmClient
    partition: Callable[[], list[SlurmNode]]
    journal: DrainJournal
    spool_dir: str
    wait_s: float
    dry_run: bool
    log: Log


def drain_in_outage(
    summary: RunSummary, allocated: Sequence[str], policy: Policy, now: datetime, by: Outage
) -> list[str]:
    """Drain a spooled run's confirmed slow nodes as with the store, the guard counting
    screener's drains of the partition from Slurm's tagged reasons: the nodes drained. Under
    the spool directory's flock, so concurrent prologs on this host count each other's
    drains; no lock, or an intent that cannot be journalled, means no drain."""
    log = by.log
    try:
        with _outage_lock(by.spool_dir, by.wait_s):
            nodes = by.partition()
            names = [n.name for n in nodes]
            window = policy.slurm.partition_window_s
            recent = tagged_drains(nodes, policy.slurm.tag, now - timedelta(seconds=window))
            log(
                f"guard: database unavailable: screener's drains counted from Slurm "
                f"({len(recent)} of {len(names)} partition nodes drained with reason "
                f"{policy.slurm.tag!r} within {window:g}s"
                + (f": {fold_nodes(sorted(recent))})" if recent else ")")
            )
            plan = decide_drains(
                summary, None, len(allocated), names, None, policy, now, allocated, recent
            )
            return _drain_journalled(plan, {n.name: n for n in nodes}, by)
    except OSError as exc:
        log(f"no drains: the spool's lock or journal failed ({exc.strerror or exc})")
        return []


def _drain_journalled(plan: DrainPlan, current: Mapping[str, SlurmNode], by: Outage) -> list[str]:
    """``plan`` carried out with the journal for records: intent, scontrol, outcome."""
    log = by.log
    if plan.basis:
        log(plan.basis)
    if plan.shared_cause is not None:
        who = fold_nodes(plan.absolved) if plan.absolved else "no node"
        log(f"{_shared(plan)}: {who} not blamed, not drained")
    if plan.guard is not None or plan.shared_cause is not None:
        if plan.guard is not None:
            log(plan.guard)
        by.journal.guard(_guard_reason(plan), (*plan.blocked, *plan.absolved))
    drained: list[str] = []
    for node, reason in plan.drain:
        if by.dry_run:
            log(f"dry-run: would drain {node} with reason {reason!r}")
            continue
        seen = current.get(node)
        if seen is not None and seen.drained:  # ours from an earlier run, or an admin's
            log(f"{node}: already drained ({seen.reason!r}); not drained again")
            continue
        by.journal.intend(node, reason)  # phase 1; OSError: no drain at all
        try:
            by.client.drain([node], reason)
        except SlurmError as exc:
            log(f"drain of {node} failed: {exc}")
            with contextlib.suppress(OSError):
                by.journal.failed(node, reason, str(exc))
            continue
        drained.append(node)
        log(f"drained {node}: {reason} (recorded in the spool)")
        with contextlib.suppress(OSError):  # the intent stays: the replay's next run settles it
            by.journal.drained(node, reason)
    return drained


@contextlib.contextmanager
def _outage_lock(spool_dir: str, wait_s: float) -> Iterator[None]:
    """An exclusive flock on the spool directory's outage lock, waited for at most
    ``wait_s``; OSError when it cannot be made or another run held it that long."""
    path = Path(spool_dir) / OUTAGE_LOCK
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OSError(f"{path} held by another run for {wait_s:g}s") from None
                time.sleep(0.05)  # another prolog is draining: seconds at most
        yield
    finally:
        os.close(fd)  # releases the lock
