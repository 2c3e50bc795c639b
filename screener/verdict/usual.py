"""A node's usual place under one recipe (issue 44): a slower drive model reads below its
peers, with a longer tail, on every read. A short read (the prolog's triage) that finds
only that is the full probe's to decide, never a drain; once the node's place and tail
are learned under the triage's own recipe it reads as usual, and no full probe is paid."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from screener.policy import VerdictPolicy
from screener.probe_data import NodeProbe
from screener.verdict.rules import MIN_HISTORY, borderline_level, fmt_ratio


def tail_ceilings(
    usable: Sequence[NodeProbe],
    tails: Mapping[str, Sequence[tuple[float, float]]],
    policy: VerdictPolicy,
) -> dict[str, tuple[float, float]]:
    """Per node with ``MIN_HISTORY`` baseline tails of this recipe: the (p99, p99.9) its
    seq read may reach and still be its own, its usual (median) tail x the round's typical
    p99 / usual p99 (a loaded round lengthens every tail; never below 1) / borderline
    (1.41x). A slower drive model's tail is long on every read; a stall that is new to the
    node is longer than that (issue 44)."""
    usual = {
        p.node: (
            statistics.median(t[0] for t in past),
            statistics.median(t[1] for t in past),
            p.seq_read.lat_p99_ns,
        )
        for p in usable
        if p.seq_read is not None and len(past := tails.get(p.node, ())) >= MIN_HISTORY
    }
    ratios = [now / p99 for p99, _, now in usual.values() if p99 > 0]
    level = max(1.0, statistics.median(ratios)) if len(ratios) >= policy.min_peers else 1.0
    room = level / borderline_level(policy)
    return {n: (p99 * room, p999 * room) for n, (p99, p999, _) in usual.items()}


# The findings that say only "this node reads unlike the round": a slower drive model always
# does. Floors, the write/read ratio and a drop from its own history say more.
RELATIVE_TAGS = frozenset({"peer_read", "peer_tail", "slow_ios", "peer_rand", "stalls"})


def usual_doubt(
    hard: Sequence[str], w_tags: Sequence[str], own: float | None, policy: VerdictPolicy
) -> str | None:
    """A short read (``policy.short_read``: the prolog's triage and its re-probe) whose only
    hard findings are peer-relative (``RELATIVE_TAGS``), on a node within the peer gap of its
    usual place among the round (``own``, ``rules.own_place``, at or above ``min_peer_drop``):
    the reason of a DEGRADED doubt that the full probe decides, else None. Issue 44: on an
    unpaced fleet a healthy slower model read 0.35-0.50x in the triage's QD8 window (0.6x
    and OK in the full probe) with a 4-5x p99 from its throttle, 0.67-0.86x of its usual
    place (peers read 1.45x faster than in the full recipe, it did not), and was drained in
    4 of 12 jobs. A node below half its place (a 1/20 reader: 0.08x) is not spared: that is
    the peer gap on its own yardstick (rules.peer_outlier)."""
    if not policy.short_read or own is None or own < policy.min_peer_drop:
        return None
    if not hard or w_tags or not set(hard) <= RELATIVE_TAGS:
        return None
    where = (
        "at its usual place among its peers"
        if at_usual_place(own, policy)
        else "within the gap of its usual place among its peers"
    )
    return (
        f"but it reads {where} ({fmt_ratio(own)}x, >= {policy.min_peer_drop:g}): a short "
        "read's finding, the full probe decides"
    )


def at_usual_place(own: float | None, policy: VerdictPolicy) -> bool:
    """At or above ``borderline_level`` (0.71) of its usual place: where it always reads.
    Only such figures are its history (a node part-way down is not learned as usual)."""
    return own is not None and own >= borderline_level(policy)
