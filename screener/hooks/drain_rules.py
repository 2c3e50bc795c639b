"""Pure drain rules of the Slurm side, shared by the prolog, the epilog and the sweep: which
verdicts are drainable, what a drain reason says, when the mass-drain guard trips, whether a
drain may be resumed, and whether a killed run's drain intent was carried out. (Which jobs
to screen: hooks/job.py; which nodes the prolog skips: prolog/rules.py.)"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime

from screener.hooks.fleet_guard import FleetView, judge_small
from screener.hostlist import fold_nodes
from screener.policy import SlurmPolicy
from screener.probe_data import RunSummary, Status, Verdict
from screener.slurm.client import SlurmNode
from screener.verdict.confirm import SHARED_CAUSE_TAG

DRAINABLE = frozenset({Status.SLOW_READ, Status.SLOW_WRITE})


def drainable(summary: RunSummary, confirm: bool) -> list[Verdict]:
    """SLOW_READ/SLOW_WRITE verdicts, confirmed ones only when confirmation is on: exactly the
    nodes for which `screen` exits 3.

    A shared cause does not hide an outlier within it (a node 50x below peers is not
    explained by a 6x fleet-wide slowdown): screener.verdict.judge already turned the nodes the
    shared cause explains into UNKNOWN (see ``absolved``), so whatever is still SLOW is such
    an outlier and is drained like any slow node."""
    return [v for v in summary.verdicts if v.status in DRAINABLE and (v.confirmed or not confirm)]


def absolved(summary: RunSummary) -> list[str]:
    """Nodes a shared cause explained (slow, not blamed: UNKNOWN with signal
    ``shared_cause``): each gets a ``guard_trip`` event, the shared-cause alert."""
    if not summary.shared_cause:
        return []
    return [v.node for v in summary.verdicts if SHARED_CAUSE_TAG in v.signals]


# Signals that say the node's sequential reads decided (then `rd 0.05x peers`); without any
# of them, the figure that fired is named instead (issue 44: a node drained on 4k random
# reads showed `rd 1.05x peers`, a ratio that says it is fine).
SEQ_DECIDED = frozenset({"peer_read", "abs_read", "history", "close_call", "outlier"})


def drain_reason(tag: str, v: Verdict, peer_read_mb_s: float | None, run_id: int | None) -> str:
    """Short reason for `sinfo -R`: tag, the figure that decided vs peers, run, e.g.
    ``screener: rd 0.05x peers r42``, ``screener: rd w/r 24x r42``, ``screener: rd 4k 0.34x
    peers r42``. The ratio is of one round: the node's read against the peer median it was
    judged against (round 2's for a confirmed node), else against ``peer_read_mb_s`` (the
    run's round-1 median)."""
    run = f" r{run_id}" if run_id is not None else ""
    if v.status == Status.SLOW_WRITE:
        figure = f"{v.write_mb_s:.0f}MB/s" if v.write_mb_s is not None else "slow"
        return f"{tag} wr {figure}{run}"
    tags = set(v.signals)
    median = v.peer_read_mb_s or peer_read_mb_s
    seq = f"{tag} rd {_ratio(v.read_mb_s / median)}x peers{run}" if v.read_mb_s and median else None
    ratio = f"{tag} rd w/r {v.ratio:.0f}x{run}" if v.ratio and math.isfinite(v.ratio) else None
    if not tags or tags & SEQ_DECIDED:  # the sequential read decided (or nothing says what)
        return seq or ratio or f"{tag} rd slow{run}"
    if "ratio" in tags and ratio:
        return ratio
    if tags & {"peer_rand", "abs_rand"} and v.rand_read_iops is not None:
        if v.peer_rand_iops:
            return f"{tag} rd 4k {_ratio(v.rand_read_iops / v.peer_rand_iops)}x peers{run}"
        return f"{tag} rd 4k {v.rand_read_iops:.0f}iops{run}"
    if "peer_tail" in tags and v.read_p99_ms is not None:
        return f"{tag} rd p99 {v.read_p99_ms:.0f}ms{run}"
    return seq or ratio or f"{tag} rd slow{run}"


def _ratio(x: float) -> str:
    return f"{x:.2f}" if x >= 0.01 else f"{x:.3f}"


@dataclass(frozen=True)
class DrainPlan:
    """Nodes to drain with their reasons, or why the guard stopped every drain; and the
    run's shared cause (with the nodes it absolved), recorded whatever is drained."""

    drain: tuple[tuple[str, str], ...] = ()
    guard: str | None = None
    blocked: tuple[str, ...] = ()  # nodes the guard kept from being drained
    shared_cause: str | None = None  # the run's shared-cause reason, if it found one
    absolved: tuple[str, ...] = ()  # slow nodes the shared cause explained (not drained)
    basis: str | None = None  # which evidence judged a small allocation (the fleet line)


def small_allocation(nodes: int, policy: SlurmPolicy) -> bool:
    """Too few nodes for the allocation fraction to be evidence: the fleet judges instead."""
    return nodes < policy.guard_min_allocation


def plan_drains(
    slow: Sequence[tuple[str, str]],
    allocation: int,
    partition: int,
    recent_drained: Set[str],
    policy: SlurmPolicy,
    fleet: FleetView | None = None,
    allocated: Sequence[str] = (),
    directions: Mapping[str, str] | None = None,
    apart: Mapping[str, str] | None = None,
) -> DrainPlan:
    """Apply the mass-drain guard to ``slow`` (node, reason) pairs.

    Never drain more than ``max_drain_fraction`` of the allocation, nor let the *distinct*
    partition nodes drained within the window (``recent_drained``, screener's drains of the
    partition's nodes) plus the new ones exceed ``partition_max_drain_fraction``: beyond
    either limit drain nobody (a shared cause is likelier than many bad nodes at once).
    A node drained before, resumed and slow again counts once: it is drained again.
    Beyond the allocation's fraction, the nodes ``apart`` (node -> why: far below even the
    other slow nodes, ``outliers``) are still drained when they alone are within it: a
    shared cause does not explain a node an order of magnitude below it (issue 44: two
    0.44x nodes tripped the guard and a 0.04x reader ran the job).

    An allocation smaller than ``guard_min_allocation`` is no evidence of a shared cause
    (1 of 1 slow says nothing): with ``fleet`` (the partition's recent figures) the fleet
    judges instead, over the same fraction, in the direction each node is slow in
    (``directions``: node -> "read"/"write", read when unsaid); the partition guard applies
    either way.
    """
    if not slow:
        return DrainPlan()
    names = tuple(n for n, _ in slow)
    n = len(slow)
    basis = None
    if fleet is not None and small_allocation(allocation, policy):
        said = {n: (directions or {}).get(n, "read") for n in names}
        hold, basis = judge_small(
            said, allocated, fleet, policy.max_drain_fraction, policy.fleet_min_nodes
        )
        if hold:
            return DrainPlan(guard=f"guard: {basis}", blocked=names)
    elif allocation > 0 and n / allocation > policy.max_drain_fraction:
        lead = (
            f"guard: {n} of {allocation} allocated nodes slow "
            f"(> {policy.max_drain_fraction:g}): shared cause suspected"
        )
        far = apart or {}
        alone = [(node, r) for node, r in slow if node in far]
        if not alone or len(alone) / allocation > policy.max_drain_fraction:
            return DrainPlan(guard=f"{lead}, nobody drained", blocked=names)
        kept = tuple(node for node in names if node not in far)
        told = "; ".join(f"{node} {far[node]}" for node, _ in alone)
        guard = f"{lead}; {told}: drained apart, {fold_nodes(list(kept))} not drained"
        plan = plan_drains(alone, allocation, partition, recent_drained, policy)
        if plan.guard is not None:  # the partition's limit still holds
            return replace(plan, blocked=names)
        return replace(plan, guard=guard, blocked=kept)
    counted = set(recent_drained) | set(names)
    if partition > 0 and len(counted) / partition > policy.partition_max_drain_fraction:
        why = (
            f"guard: {len(counted)} distinct of {partition} partition nodes drained within "
            f"{policy.partition_window_s:g}s (> {policy.partition_max_drain_fraction:g}): "
            f"{_counted(recent_drained, names)}: nobody drained"
        )
        return DrainPlan(guard=why, blocked=names, basis=basis)
    return DrainPlan(drain=tuple(slow), basis=basis)


def far_below(verdicts: Sequence[Verdict], factor: float) -> dict[str, str]:
    """Slow readers more than ``factor`` (``shared_outlier_factor``, 10) below the median seq
    read of the *other* slow nodes, each with why: what a shared cause cannot explain."""
    reads = {v.node: v.read_mb_s for v in verdicts if v.status == Status.SLOW_READ}
    out: dict[str, str] = {}
    for node, mb_s in reads.items():
        others = [r for n, r in reads.items() if n != node and r is not None]
        if mb_s is None or not others:
            continue
        mid = statistics.median(others)
        if mb_s * factor < mid:
            out[node] = (
                f"reads {mb_s:,.0f} MB/s, over {factor:g}x below the other slow nodes'"
                f" {mid:,.0f} MB/s"
            )
    return out


def _counted(recent: Set[str], new: Sequence[str]) -> str:
    """Which nodes the partition guard counted: drained before, new now, drained again."""
    parts = []
    if before := [r for r in recent if r not in new]:
        parts.append(f"{fold_nodes(before)} drained before")
    if again := [n for n in new if n in recent]:
        parts.append(f"{fold_nodes(again)} slow again")
    if fresh := [n for n in new if n not in recent]:
        parts.append(f"{fold_nodes(fresh)} slow now")
    return ", ".join(parts)


def tagged_drains(nodes: Sequence[SlurmNode], tag: str, since: datetime) -> frozenset[str]:
    """The nodes Slurm shows drained by screener at or after ``since``: drained, with a
    reason that is screener's (``tag``, then a space and what drain_reason or the sweep's
    soft drain wrote, e.g. ``screener: rd 0.05x peers r42``), set at or after ``since``.

    Why: the partition guard counts screener's drains of the partition within its window
    (``recent_drained`` of plan_drains), read from the store; with the database down, Slurm's
    own drains and their reason times (``sinfo -R``) are the record left. A node whose reason
    time Slurm does not give counts as within the window: an unknown time errs toward fewer
    drains. Another tag (an admin's reason, the ingest's ``screener-job:``) is not counted,
    nor a node no longer drained (resumed: Slurm cleared the reason). ``since`` is aware,
    as ``reason_time`` is (UTC)."""
    return frozenset(
        n.name
        for n in nodes
        if n.drained
        and (n.reason == tag or n.reason.startswith(f"{tag} "))
        and (n.reason_time is None or n.reason_time >= since)
    )


def may_resume(node: SlurmNode, recorded: str | None) -> tuple[bool, str]:
    """Resume only a drain screener made whose reason nobody changed since."""
    if not node.drained:
        return False, f"{node.name} is not drained"
    if recorded is None:
        return False, f"{node.name}: screener has no drain on record; not ours"
    if node.reason != recorded:
        return False, (
            f"{node.name}: current reason {node.reason!r} is not screener's {recorded!r}; "
            "left alone"
        )
    return True, f"{node.name}: reason is screener's own"


def settle_intent(reason: str, current: SlurmNode | None) -> tuple[bool, str]:
    """Was a drain intent (recorded, then its run killed around ``scontrol``) carried out?

    Only if Slurm shows the node drained with exactly the intended reason (reasons carry the
    run id, so no other drain has the same one). Anything else, including a node Slurm no
    longer knows, abandons the intent: screener never claims a drain it cannot prove.
    """
    if current is None:
        return False, "Slurm no longer lists the node; intent abandoned"
    if current.drained and current.reason == reason:
        return True, f"Slurm shows the intended reason {reason!r}: drain recorded after the run"
    if not current.drained:
        return False, "not drained in Slurm (the run stopped before scontrol); intent abandoned"
    return False, (
        f"drained with reason {current.reason!r}, not the intended {reason!r}: not ours; "
        "intent abandoned"
    )
