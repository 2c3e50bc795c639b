"""Per-node decisions: pure functions over parsed probes, peers and history.

``evaluate`` judges one probe round, ``judge_round2`` the re-probe of the suspects (beside
a few healthy reference nodes); ``confirm`` merges that into the first round's verdicts, so
only a slowness that shows up twice is final (seed 001 §7: slowness comes and goes).
Nothing here does I/O; the rules live in ``screener.verdict.rules``, confirmation in
``screener.verdict.confirm``; docs/detection.md explains each.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace

from screener.policy import VerdictPolicy
from screener.probe_data import FleetFigure, NodeProbe, RunSummary, Status, Verdict
from screener.verdict.confirm import (
    SHARED_CAUSE_TAG,
    SLOW,
    SLOWER_DEVICE_TAG,
    USUAL_PLACE_TAG,
    WRITE_TAGS,
    confirm,
    counts_as_slow,
    is_suspect,
    references,
    suspects,
)
from screener.verdict.rules import (
    MIN_HISTORY,
    SHARED_HISTORY_LEVEL,
    SOFT_TAGS,
    PeerStats,
    TailStats,
    at_par,
    close_call,
    fact_drift,
    fact_problems,
    fmt_iops,
    fmt_mb,
    fmt_ratio,
    history_level,
    history_ratios,
    history_reason,
    learned_place,
    own_place,
    peer_reason,
    peer_stats,
    ratio_crowd,
    ratio_near_cut,
    ratio_peers,
    ratio_reason,
    read_stall,
    tail_signals,
    tail_stats,
    usual_levels,
)
from screener.verdict.shadow import shadowed
from screener.verdict.usual import (
    DEVICE_WRITE_TAGS,
    at_usual_place,
    falling,
    masked_writer,
    slower_device,
    tail_ceilings,
    usual_doubt,
)

__all__ = ["MIN_HISTORY", "SLOW", "confirm", "evaluate", "fact_drift", "fact_problems"]
__all__ += ["is_suspect", "judge_round2", "peer_stats", "references", "suspects"]

PEER_TAGS = frozenset({"peer_read", "peer_rand", "peer_write", "peer_tail", "outlier"})
FLOOR_TAGS = frozenset({"abs_read", "abs_write", "abs_rand"})


@dataclass(frozen=True)
class _Peers:
    """Everything a node is compared with in one round."""

    read: PeerStats | None
    write: PeerStats | None
    rand: PeerStats | None
    tails: Mapping[str, TailStats]
    borrowed: int  # fleet figures used as extra peers (small allocations only)
    ratio: PeerStats | None = None  # of read/write, when the ratio is judged relatively
    ratio_relative: bool = False  # a crowd over the cut, the round near it, a shared cause
    ratio_crowd: bool = False  # most of the round over the ratio (rules.ratio_crowd)


def _read_signals(
    p: NodeProbe,
    peers: _Peers,
    history: Sequence[float],
    policy: VerdictPolicy,
    level: float | None,
    ceiling: tuple[float, float] | None = None,
) -> tuple[list[str], list[str]]:
    """Rules that say "this node reads slowly": (signal tags, reason parts). ``ceiling``:
    where its seq-read tail usually sits (tail_ceilings)."""
    assert p.seq_read is not None
    tags: list[str] = []
    why: list[str] = []
    bw = p.seq_read.bw_bytes
    own = own_place(bw, history, level)
    if text := peer_reason(peers.read, bw, "seq read", fmt_mb, policy, own=own):
        tags.append("peer_read")
        why.append(text)
    if policy.min_read_mb_s and bw / 1e6 < policy.min_read_mb_s:
        tags.append("abs_read")
        why.append(f"seq read {fmt_mb(bw)} < floor {policy.min_read_mb_s:g} MB/s")
    if text := ratio_reason(p.write_read_ratio, peers.ratio, peers.ratio_relative, policy):
        tags.append("ratio")
        why.append(text)
    for name, label in (("seq_read", "seq read"), ("rand_read", "4k rand read")):
        job = getattr(p, name)
        if job is not None:
            its = ceiling if name == "seq_read" else None
            t, w = tail_signals(job, label, peers.tails[name], policy, its)
            tags.extend(t for t in t if t not in tags)
            why.extend(w)
    r_await = p.read_r_await_ms
    if policy.max_r_await_ms and r_await is not None and r_await > policy.max_r_await_ms:
        tags.append("r_await")
        why.append(f"iostat r_await {r_await:.0f} ms > {policy.max_r_await_ms:g} ms")
    if p.rand_read is not None:
        iops = p.rand_read.iops
        drop = policy.rand_peer_drop
        if text := peer_reason(peers.rand, iops, "4k rand read", fmt_iops, policy, drop):
            tags.append("peer_rand")
            why.append(text)
        if policy.min_rand_read_iops and iops < policy.min_rand_read_iops:
            tags.append("abs_rand")
            why.append(f"4k rand read {iops:,.0f} IOPS < floor {policy.min_rand_read_iops:g}")
    text = history_reason(bw, history, policy, level)
    if text and not at_par(bw, peers.read, peers.borrowed, level, policy):
        tags.append("history")
        why.append(text)
    usual = own if level is not None else None  # a place among a round with a yardstick
    if "peer_read" not in tags and (
        text := close_call(peers.read, bw, policy, peers.borrowed, usual)
    ):
        tags.append("close_call")
        why.append(text)
    return tags, why


def _write_signals(
    p: NodeProbe, peers: _Peers, policy: VerdictPolicy
) -> tuple[list[str], list[str]]:
    """Rules that say "this node writes slowly" (none for a read-only probe)."""
    tags: list[str] = []
    why: list[str] = []
    if p.seq_write is None:
        return tags, why
    bw = p.seq_write.bw_bytes
    if text := peer_reason(peers.write, bw, "seq write", fmt_mb, policy):
        tags.append("peer_write")
        why.append(text)
    if policy.min_write_mb_s and bw / 1e6 < policy.min_write_mb_s:
        tags.append("abs_write")
        why.append(f"seq write {fmt_mb(bw)} < floor {policy.min_write_mb_s:g} MB/s")
    return tags, why


def _judge(
    p: NodeProbe,
    peers: _Peers,
    history: Sequence[float],
    drift: Sequence[str],
    policy: VerdictPolicy,
    history_level: float | None = None,
    ceiling: tuple[float, float] | None = None,
    learned: float | None = None,
) -> Verdict:
    """Verdict for one usable node given the round's peer statistics (``history_level``:
    the round's typical read / own history, see rules.history_level; ``ceiling``: where
    its tail usually sits under this recipe, tail_ceilings, None when not known;
    ``learned``: where its history puts it among the round, rules.learned_place)."""
    assert p.seq_read is not None
    r_tags, r_why = _read_signals(p, peers, history, policy, history_level, ceiling)
    w_tags, w_why = _write_signals(p, peers, policy)
    problems = fact_problems(p.facts)
    bw, iops = p.seq_read.bw_bytes, p.rand_read.iops if p.rand_read else None
    figures = Verdict(
        node=p.node,
        status=Status.OK,
        reason="",
        read_mb_s=p.seq_read.mb_s,
        write_mb_s=p.seq_write.mb_s if p.seq_write else None,
        rand_read_iops=iops,
        ratio=p.write_read_ratio,
        read_p99_ms=p.seq_read.lat_p99_ns / 1e6,
        read_p999_ms=p.seq_read.lat_p999_ns / 1e6,
        rand_read_p99_ms=p.rand_read.lat_p99_ns / 1e6 if p.rand_read else None,
        z_read=peers.read.z(bw) if peers.read else None,
        z_rand=peers.rand.z(iops) if peers.rand and iops is not None else None,
        signals=tuple(r_tags + w_tags),
        recipe=p.recipe,
        peer_read_mb_s=peers.read.median / 1e6 if peers.read else None,
        peer_rand_iops=peers.rand.median if peers.rand else None,
        own_place=own_place(bw, history, history_level) if history_level is not None else None,
    )
    hard = [t for t in r_tags if t not in SOFT_TAGS]
    # only where usual_doubt would spare a lone seq-read peer finding (not per node)
    fall = not policy.short_read and set(hard) == {"peer_read"} and falling(history, bw)
    if (doubt := usual_doubt(hard, w_tags, figures.own_place, policy, learned, fall)) is not None:
        usual = at_usual_place(figures.own_place, policy)
        own = figures.own_place or 0.0
        only_place = not problems and set(r_tags) <= {"peer_read"}
        if usual and only_place and not policy.short_read:
            # The full probe: the peer finding is where this node reads among them.
            return replace(
                figures,
                reason=f"{r_why[0]}, within its usual place among its peers ({fmt_ratio(own)}x)",
                signals=(),
                baseline=True,
            )
        if usual and only_place and ceiling is not None:
            # Its place and its tail learned under this very recipe: as usual for it.
            return replace(
                figures,
                reason=f"within its usual place among its peers ({fmt_ratio(own)}x) and tail",
                signals=(),
                baseline=True,
            )
        # At its usual place, its figures are its place under this recipe (baseline): after
        # MIN_HISTORY such screens (each vouched by the full probe that follows) it reads as
        # usual. Part-way down (0.5-0.71 of it) they are not: a drop is never learned.
        return replace(
            figures,
            status=Status.DEGRADED,
            reason="; ".join([*r_why, doubt, *problems, *(f"drift: {d}" for d in drift)]),
            signals=(*r_tags, USUAL_PLACE_TAG),
            baseline=usual,
        )
    if (
        not problems
        and (device := _slower_device(p, peers, r_tags, w_tags, policy, learned)) is not None
        and not falling(history, bw)  # a drive on its way down, both ways: judged as any
    ):
        # Slower both ways: its place, not a fault. Its figures are its history, so its
        # place is learned; at that place it reads as usual (OK), before that DEGRADED.
        usual = at_usual_place(figures.own_place, policy)
        return replace(
            figures,
            status=Status.OK if usual else Status.DEGRADED,
            reason=f"{'; '.join(r_why + w_why)}, {device}",
            signals=() if usual else (SLOWER_DEVICE_TAG,),
            baseline=True,
        )
    if not hard and not w_tags and r_tags:
        # Only soft evidence (a stall mode): DEGRADED, probed again next time, never drained.
        parts = r_why + problems + [f"drift: {d}" for d in drift]
        tags = r_tags + (["facts"] if problems else [])
        # A close call alone is where the node reads, not a fault: its figures are its own
        # history, so a slower drive model learns its usual place (and stops being a close
        # call, see rules.close_call) while the peer gap and history_drop still catch a drop.
        usual = tags == ["close_call"]
        return replace(
            figures,
            status=Status.DEGRADED,
            reason="; ".join(parts),
            signals=tuple(tags),
            baseline=usual,
        )
    if r_tags or w_tags:
        status = Status.SLOW_READ if hard else Status.SLOW_WRITE
        parts = r_why + w_why
        if problems:
            status = Status.DEGRADED
            parts = parts + problems
        parts = parts + [f"drift: {d}" for d in drift]
        return replace(figures, status=status, reason="; ".join(parts))
    if problems:
        return replace(figures, status=Status.DEGRADED, reason="; ".join(problems))
    return replace(figures, reason="within peers and thresholds", baseline=True)


def _slower_device(
    p: NodeProbe,
    peers: _Peers,
    r_tags: Sequence[str],
    w_tags: Sequence[str],
    policy: VerdictPolicy,
    learned: float | None = None,
) -> str | None:
    """usual.slower_device on this node's read findings (soft ones too: a stall is said as
    ever), its read and write against the round's medians and its learned place."""
    if p.seq_read is None or p.seq_write is None or peers.read is None or peers.write is None:
        return None
    read = p.seq_read.bw_bytes / peers.read.median if peers.read.median > 0 else None
    write = p.seq_write.bw_bytes / peers.write.median if peers.write.median > 0 else None
    return slower_device(r_tags, w_tags, read, write, policy, learned)


def _failure(p: NodeProbe, policy: VerdictPolicy) -> Verdict:
    """UNKNOWN (never drain on an error) with every fact already collected kept visible."""
    parts = [p.error or "probe produced no read/write figures"]
    tags: list[str] = []
    if problems := fact_problems(p.facts):
        tags.append("facts")
        parts.append("facts: " + ", ".join(problems))
    status = Status.UNKNOWN
    if stall := read_stall(p, policy):
        tags.append("read_timeout")
        parts.append(stall)
        if policy.drain_read_timeout:
            status = Status.SLOW_READ
    return Verdict(p.node, status, "; ".join(parts), signals=tuple(tags), recipe=p.recipe)


def _peers(
    usable: Sequence[NodeProbe],
    fleet: Sequence[FleetFigure],
    policy: VerdictPolicy,
    within_shared: bool = False,
) -> _Peers:
    """Peer statistics of the round; too few nodes borrow the fleet's recent figures. The
    write/read ratio is judged against the round's ratios when most of the round is over
    it, the round's own ratios are near the cut (rules.ratio_near_cut) or
    ``within_shared`` (rules.ratio_reason)."""
    reads = [p.seq_read.bw_bytes for p in usable if p.seq_read]
    writes = [p.seq_write.bw_bytes for p in usable if p.seq_write]
    rands = [p.rand_read.iops for p in usable if p.rand_read]
    borrowed: list[FleetFigure] = []
    if len(usable) < policy.min_peers:
        own = {p.node for p in usable}
        borrowed = [f for f in fleet if f.node not in own and f.read_bw > 0]
        reads += [f.read_bw for f in borrowed]
        writes += [f.write_bw for f in borrowed if f.write_bw is not None]
        rands += [f.rand_iops for f in borrowed if f.rand_iops is not None]
    tails = {
        name: tail_stats([j for p in usable if (j := getattr(p, name)) is not None], policy)
        for name in ("seq_read", "rand_read")
    }
    ratios = [r for p in usable if (r := p.write_read_ratio) is not None]
    crowd = ratio_crowd(ratios, policy)
    relative = within_shared or crowd or ratio_near_cut(ratios, policy)
    return _Peers(
        read=peer_stats(reads, policy),
        write=peer_stats(writes, policy),
        rand=peer_stats(rands, policy) if rands else None,
        tails=tails,
        borrowed=len(borrowed),
        ratio=ratio_peers(ratios, policy) if relative else None,
        ratio_relative=relative,
        ratio_crowd=crowd,
    )


def evaluate(
    probes: Sequence[NodeProbe],
    history: Mapping[str, Sequence[float]],
    policy: VerdictPolicy,
    fleet: Sequence[FleetFigure] = (),
    within_shared: bool = False,
    tails: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> RunSummary:
    """Judge one probe round: a Verdict per node, plus the shared-cause flag.

    Errors of any kind give UNKNOWN. ``fleet`` holds recent figures of other nodes (same
    recipe), used as extra peers only when fewer than ``min_peers`` nodes are usable.
    ``within_shared``: an earlier round of this screen found a shared cause (judge_round2),
    so the write/read ratio counts only against this round's ratios. ``tails``: each
    node's baseline seq-read tails of this recipe (store.history.past_tails).
    """
    usable = [p for p in probes if p.usable]
    ceilings = tail_ceilings(usable, tails or {}, policy)
    peers = _peers(usable, fleet, policy, within_shared)
    drift = fact_drift({p.node: p.facts for p in usable})
    reads = {p.node: p.seq_read.bw_bytes for p in usable if p.seq_read}
    ratios = history_ratios(reads, history)
    level = history_level(ratios, policy.min_peers)
    levels = usual_levels(history, list(reads))
    verdicts: dict[str, Verdict] = {}
    for p in probes:
        if not p.usable:
            verdicts[p.node] = shadowed(_failure(p, policy), policy.shadow)
        else:
            hist = history.get(p.node, ())
            ceiling = ceilings.get(p.node)
            learned = learned_place(p.node, levels, policy.min_peers)
            judged = _judge(p, peers, hist, drift.get(p.node, []), policy, level, ceiling, learned)
            verdicts[p.node] = shadowed(judged, policy.shadow)
    # Before the shared-cause passes rewrite them: a node counted slow on the read side
    slow_reads = _slow_reads(verdicts.values())
    if len(usable) < policy.min_peers:
        shared_reason = _small_allocation(verdicts, len(usable), peers, policy)
    else:
        shared_reason = _shared_cause(verdicts, len(usable), peers, policy)
    w_r = {p.node: r for p in usable if (r := p.write_read_ratio) is not None}
    if peers.ratio_crowd:  # decided once, from the same ratios, in _peers
        crowd = _shared_ratio(verdicts, w_r, policy)
        shared_reason = "; ".join(r for r in (shared_reason, crowd) if r)
    reads_below = level is not None and level < SHARED_HISTORY_LEVEL
    if level is not None and reads_below:
        below = _shared_history(verdicts, ratios, policy, level)
        shared_reason = "; ".join(r for r in (shared_reason, below) if r)
    if shared_reason and (slow_reads or peers.ratio_crowd or reads_below):
        known = {n for n in reads if learned_place(n, levels, policy.min_peers) is not None}
        _masked_writers(verdicts, peers, policy, known)
    return RunSummary(
        verdicts=tuple(verdicts[p.node] for p in probes),
        shared_cause=bool(shared_reason),
        shared_cause_reason=shared_reason,
        peer_read_median_mb_s=peers.read.median / 1e6 if peers.read else None,
        peer_rand_median_iops=peers.rand.median if peers.rand else None,
    )


def judge_round2(
    first: Sequence[NodeProbe],
    second: Sequence[NodeProbe],
    refs: Sequence[str],
    history: Mapping[str, Sequence[float]],
    fleet: Sequence[FleetFigure],
    policy: VerdictPolicy,
    tails: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> RunSummary:
    """Judge the re-probe on round-2 figures: each suspect beside the re-probed references
    only, never beside the other suspects (two nodes at 1/4 together dragged the round-2
    median down and widened its spread until each passed: issue 24). The references'
    verdicts and a round-2 shared cause come from the whole round.

    Without references (every usable node was a suspect) the suspects' round-2 figures are
    judged beside the others' round-1 figures, and confirm() says so in the reason.
    Here, not in verdict.confirm: it is ``evaluate`` applied to round 2, and confirm.py sits
    below this module (judge.py imports it).

    A shared cause in round 1 holds for round 2 (``within_shared``): a write/read ratio
    counts only against round 2's ratios. Round 2's few nodes, writing faster than eight
    did, put the references at 4.8x and a suspect at 7.3x, and the ratio alone drained a
    healthy node within a 6x read slowdown (issue 44).
    """
    shared = evaluate(first, history, policy, fleet, tails=tails).shared_cause
    if refs:
        whole = evaluate(second, history, policy, fleet, shared, tails)
        ref_probes = [p for p in second if p.node in refs]
        alone = [p for p in second if p.node not in refs]
        if len(alone) < 2 or whole.shared_cause:
            return whole  # one suspect: the same judgement; a shared cause: the whole round's
        own = {
            p.node: next(
                v
                for v in evaluate([p, *ref_probes], history, policy, fleet, shared, tails).verdicts
                if v.node == p.node
            )
            for p in alone
        }
        return replace(whole, verdicts=tuple(own.get(v.node, v) for v in whole.verdicts))
    again = {p.node: p for p in second}
    return evaluate([again.get(p.node, p) for p in first], history, policy, fleet, shared, tails)


def _shared_cause(
    verdicts: dict[str, Verdict], usable: int, peers: _Peers, policy: VerdictPolicy
) -> str:
    """A real majority of a real population slow together: a shared cause (filesystem,
    fabric, firmware rollout). The suspects become UNKNOWN, except a node that is an
    outlier among its peers *now* (a peer rule fired within this round) or an order of
    magnitude (``shared_outlier_factor``) below the peer median: that one is still slow
    (and drained once confirmed). The absolved get signal ``shared_cause``; their figures
    are baselines, so history learns the new level instead of freezing. Returns the run's
    shared-cause reason ("" when none)."""
    slow = [v for v in verdicts.values() if counts_as_slow(v)]
    fraction = len(slow) / usable if usable else 0.0
    if len(slow) < 2 or not (fraction > policy.shared_cause_fraction or len(slow) == usable):
        return ""
    reason = f"{len(slow)}/{usable} nodes slow together: shared cause"
    floor = peers.read.median / policy.shared_outlier_factor if peers.read else 0.0
    for v in slow:
        if set(v.signals) & (PEER_TAGS | FLOOR_TAGS):
            verdicts[v.node] = replace(v, reason=f"{v.reason} (outlier within a shared cause)")
        elif v.read_mb_s is not None and v.read_mb_s * 1e6 < floor:
            verdicts[v.node] = replace(
                v,
                signals=(*v.signals, "outlier"),
                reason=f"{v.reason}; seq read {v.read_mb_s:,.0f} MB/s is more than "
                f"{policy.shared_outlier_factor:g}x below the shared level "
                f"{floor * policy.shared_outlier_factor / 1e6:,.0f} MB/s",
            )
        else:
            verdicts[v.node] = replace(
                v,
                status=Status.UNKNOWN,
                reason=f"{reason}, not blamed ({v.reason})",
                baseline=True,
                signals=(*v.signals, SHARED_CAUSE_TAG),
            )
    return reason


# A write rule's tags; every other finding is on the read side (a read rule, the ratio).
_WRITE_ONLY_TAGS = WRITE_TAGS - {"ratio"}


def _slow_reads(verdicts: Iterable[Verdict]) -> bool:
    """Whether most nodes that count as slow (confirm.counts_as_slow) have a read-side
    finding (a read rule, the write/read ratio): a shared cause among them is on the reads."""
    slow = [v for v in verdicts if counts_as_slow(v)]
    return 2 * sum(1 for v in slow if set(v.signals) - _WRITE_ONLY_TAGS) > len(slow)


def _masked_writers(
    verdicts: dict[str, Verdict], peers: _Peers, policy: VerdictPolicy, known: Set[str]
) -> None:
    """Nodes found only on their seq write while the round's reads are slow together
    (usual.masked_writer): DEGRADED ``slower_device``, never drained or re-probed. Not the
    ``known``, whose history places their read (usual.slower_device already judged them
    with it: a write 2x below that place is a slow writer)."""
    median = peers.write.median if peers.write else 0.0
    for node, v in verdicts.items():
        if node in known or v.status != Status.SLOW_WRITE or not v.signals or v.write_mb_s is None:
            continue
        if not set(v.signals) <= DEVICE_WRITE_TAGS or median <= 0:
            continue
        if (why := masked_writer(v.write_mb_s * 1e6 / median, policy)) is None:
            continue
        verdicts[node] = replace(
            v,
            status=Status.DEGRADED,
            reason=f"{v.reason.removesuffix(' (outlier within a shared cause)')}, {why}",
            signals=(SLOWER_DEVICE_TAG,),
            baseline=True,  # as the nodes the shared cause absolved: history learns the level
        )


def _shared_history(
    verdicts: dict[str, Verdict], ratios: Mapping[str, float], policy: VerdictPolicy, level: float
) -> str:
    """The round's nodes read well below their own history *together* (``level``, the
    median of ``ratios``, under SHARED_HISTORY_LEVEL): a fleet-wide slowdown the peers
    cannot see, as they share it. The history rule already judged each node against that
    level; the nodes the plain rule would have blamed (below ``history_drop`` x own) become
    UNKNOWN with signal ``shared_cause`` (a guard_trip each; baselines, so history learns
    the new level), as in _shared_cause. An outlier within it stays slow. Returns the
    run's reason."""
    below = [node for node, ratio in ratios.items() if ratio < policy.history_drop]
    for node in below:
        v = verdicts[node]
        if is_suspect(v) or SHARED_CAUSE_TAG in v.signals:  # an outlier, or already said
            continue
        verdicts[node] = replace(
            v,
            status=Status.UNKNOWN,
            reason=f"below its own history with the round's nodes, not blamed ({v.reason})",
            baseline=True,
            signals=(*v.signals, SHARED_CAUSE_TAG),
        )
    if not below:
        return ""
    return (
        f"{len(below)}/{len(ratios)} nodes read below {policy.history_drop:g}x their own "
        f"history (the round's median {level:.2f}x): shared cause, not blamed on any one node"
    )


def _shared_ratio(
    verdicts: dict[str, Verdict], ratios: Mapping[str, float], policy: VerdictPolicy
) -> str:
    """Most of the round reads over ``max_write_read_ratio`` slower than it writes
    (rules.ratio_crowd): the reads are slow everywhere, a shared cause (a site-wide
    read-ahead or firmware setting, seeds 001 and 003). The ratio rule judged each node
    against the round's ratios; the nodes over the cut that no rule blamed become UNKNOWN
    with signal ``shared_cause`` (a guard_trip each; baselines, so history learns the new
    level), as in _shared_cause. Returns the run's reason."""
    cut = policy.max_write_read_ratio
    over = [node for node, ratio in ratios.items() if ratio > cut]
    typical = statistics.median(ratios.values())
    for node in over:
        v = verdicts[node]
        if v.status != Status.OK or not v.baseline:  # blamed, or a shadow rule's say
            continue
        verdicts[node] = replace(
            v,
            status=Status.UNKNOWN,
            reason=f"write/read {ratios[node]:.1f}x > {cut:g}x as the round's nodes (median "
            f"{typical:.1f}x): shared cause, not blamed",
            baseline=True,
            signals=(*v.signals, SHARED_CAUSE_TAG),
        )
    return (
        f"{len(over)}/{len(ratios)} nodes read over {cut:g}x slower than they write (the "
        f"round's median write/read {typical:.1f}x): shared cause, not blamed on any one node"
    )


def _small_allocation(
    verdicts: dict[str, Verdict], usable: int, peers: _Peers, policy: VerdictPolicy
) -> str:
    """Fewer than ``min_peers`` usable nodes: what such a run can honestly judge.

    Admin floors always count. Otherwise a node is slow only against the fleet's recent
    figures (borrowed peers), on its write/read ratio (a shared filesystem slowdown does
    not make one node read 5x slower than it writes), or when a node of the same allocation
    is fine. All nodes slow together is a shared cause; a lone node's own history or
    latency alone is not enough: UNKNOWN, visible, not drained."""
    basis = f"small allocation ({usable} < min_peers {policy.min_peers}: "
    basis += f"{peers.borrowed} fleet figures as peers, own history, floors)"
    slow = [v for v in verdicts.values() if counts_as_slow(v)]
    together = usable >= 2 and len(slow) == usable
    outliers = (
        {v.node: _below_the_allocation(v, verdicts, policy) for v in slow} if together else {}
    )
    for node, v in list(verdicts.items()):
        if v.status == Status.UNKNOWN or v.read_mb_s is None:
            continue
        tags = set(v.signals)
        beside = outliers.get(node, "")
        if not is_suspect(v) or tags & FLOOR_TAGS:
            verdicts[node] = replace(v, reason=f"{v.reason} [{basis}]")
        elif beside:
            verdicts[node] = replace(
                v, signals=(*v.signals, "outlier"), reason=f"{v.reason}; {beside} [{basis}]"
            )
        elif together:
            verdicts[node] = replace(
                v,
                status=Status.UNKNOWN,
                reason=f"all {usable} nodes slow together, not blamed ({v.reason}) [{basis}]",
                baseline=not tags & PEER_TAGS,  # the fleet agrees they are fine: learn it
                signals=(*v.signals, SHARED_CAUSE_TAG),
            )
        elif tags & (PEER_TAGS | {"ratio"}) or usable >= 2:
            verdicts[node] = replace(v, reason=f"{v.reason} [{basis}]")
        else:
            verdicts[node] = replace(
                v,
                status=Status.UNKNOWN,
                reason=f"{v.reason}: own figures only, no peers to tell a node from a "
                f"shared cause [{basis}]",
            )
    return f"all {usable} nodes slow together: shared cause" if together else ""


def _below_the_allocation(v: Verdict, verdicts: dict[str, Verdict], policy: VerdictPolicy) -> str:
    """Why ``v`` is an outlier within its own small allocation, or "": its seq read more
    than ``shared_outlier_factor`` below the median of the allocation's other nodes. All
    nodes "slow together" against borrowed fleet figures may be one node 0.04x and one
    healthy node a noisy 0.49x on 4k IOPS (seen in CI): that is not a shared cause for the
    first. A uniform slowdown leaves every node near the others: nobody is an outlier."""
    others = [
        o.read_mb_s
        for o in verdicts.values()
        if o.node != v.node and o.read_mb_s is not None and o.status != Status.UNKNOWN
    ]
    if not others or v.read_mb_s is None:
        return ""
    mid = statistics.median(others)
    if v.read_mb_s * policy.shared_outlier_factor >= mid:
        return ""
    return (
        f"seq read {v.read_mb_s:,.0f} MB/s is more than {policy.shared_outlier_factor:g}x "
        f"below the allocation's other nodes ({mid:,.0f} MB/s): an outlier, not the shared cause"
    )
