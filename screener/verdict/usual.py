"""A node's usual place under one recipe (issue 44): a slower drive model reads below its
peers, with a longer tail, on every read. A short read (the prolog's triage) that finds
only that is the full probe's to decide, never a drain; once the node's place and tail
are learned under the triage's own recipe it reads as usual, and no full probe is paid."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from screener.policy import VerdictPolicy
from screener.probe_data import NodeProbe
from screener.verdict.rules import MIN_HISTORY, borderline_level, fmt_ratio
from screener.verdict.trend import Point, fit


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
    hard: Sequence[str],
    w_tags: Sequence[str],
    own: float | None,
    policy: VerdictPolicy,
    learned: float | None = None,
    falling: bool = False,
) -> str | None:
    """A finding that is only where the node usually reads among the round: the reason of
    a DEGRADED doubt (signal ``usual_place``, never a drain), else None. Only on a node
    within the peer gap of its usual place (``own``, ``rules.own_place``, at or above
    ``min_peer_drop``): the gap on its own yardstick.

    A short read (``policy.short_read``: the prolog's triage and its re-probe) whose only
    hard findings are peer-relative (``RELATIVE_TAGS``) is the full probe's to decide.
    Issue 44: on an unpaced fleet a healthy slower model read 0.35-0.50x in the triage's QD8
    window (0.6x and OK in the full probe) with a 4-5x p99 from its throttle, 0.67-0.86x
    of its usual place, and was drained in 4 of 12 jobs.

    The full probe spares only a seq-read peer finding of a node whose history puts it at or
    above two gaps below its peers (``learned``: rules.learned_place, at or above
    ``min_peer_drop`` squared, 0.25): issue 44 again, the prolog's full probe read the
    throttled model at its own baseline while peers read 1.6x theirs (fewer nodes at once):
    0.38x the peers, `SLOW_READ confirmed`, drained in 5 of 6 jobs. A node whose usual is
    under a quarter of its peers' is no drive model but a fault its history learned. A
    random-read fault, a tail past its usual ceiling, a write finding, a floor or its
    history say more and are judged as ever. A node below half its place (a 1/20 reader:
    0.05x) is not spared (rules.peer_outlier), nor one whose baselines are ``falling``
    (``falling``): a node that creeps down learns each step as its place, and sparing it
    at its place let one reach 0.45x its peers before it was SLOW (test_trend_cluster)."""
    if own is None or own < policy.min_peer_drop or w_tags or not hard:
        return None
    where = (
        "at its usual place among its peers"
        if at_usual_place(own, policy)
        else "within the gap of its usual place among its peers"
    )
    if policy.short_read:
        if not set(hard) <= RELATIVE_TAGS:
            return None
        return (
            f"but it reads {where} ({fmt_ratio(own)}x, >= {policy.min_peer_drop:g}): a short "
            "read's finding, the full probe decides"
        )
    floor = policy.min_peer_drop**2
    if set(hard) != {"peer_read"} or learned is None or learned < floor or falling:
        return None
    return (
        f"but it reads {where} ({fmt_ratio(own)}x, >= {policy.min_peer_drop:g}), and its "
        f"history puts it at {fmt_ratio(learned)}x its peers (>= {floor:g}): its own place, "
        "not a drop; not drained"
    )


# The findings a slower device gives on every probe: it reads (a close call, or below the
# gap) and writes below the round. Tails, random reads, floors, its history and the
# write/read ratio say more and are judged as ever.
DEVICE_READ_TAGS = frozenset({"peer_read", "close_call"})
DEVICE_WRITE_TAGS = frozenset({"peer_write"})


def slower_device(
    r_tags: Sequence[str],
    w_tags: Sequence[str],
    read: float | None,
    write: float | None,
    policy: VerdictPolicy,
    learned: float | None = None,
) -> str | None:
    """Peer findings only (``r_tags``, ``w_tags``) on a node that reads and writes alike
    below its peers: the reason of a slower device (signal ``slower_device``, never
    drained), else None. ``read``, ``write``: its seq read and write / the peer medians.

    The mission's fault reads far slower than it writes (seed 001); a slower drive model,
    firmware or fill level is slower both ways. Issue 44: on an unpaced mixed fleet the
    slower model (read and write paced at 0.6x) read 0.47-0.58x its peers in round 1 and
    wrote 0.39x; with no history to give it a place it was drained in 6 of 6 fresh prolog
    screens. Alike means: both below ``borderline_level`` (0.71) and at or above
    ``min_peer_drop`` squared (0.25: a quarter of the peers is a fault either way); its
    read no more than 1/0.71 further below its peers than its write (the fault's direction,
    held tight: a 3x reader beside a normal write is never spared) and its write no more
    than 1/``min_peer_drop`` (2x) further below than its read (writes spread more).

    A write finding beside a read that is not below the round (no read finding) counts its
    read at ``learned`` (rules.learned_place: where its history puts it among the round)
    when that is in the same band: a read slowdown shared by the fleet (seeds 001 and 003)
    brings every read down to the slower model's, and only its write still showed it,
    `SLOW_WRITE confirmed` (2026-12-03, the prolog matrix's read-slowdown cases)."""
    tags = {*r_tags, *w_tags}
    edge, floor = borderline_level(policy), policy.min_peer_drop**2
    now = read
    masked = not r_tags and learned is not None and read is not None and read >= edge
    if masked:
        read = learned
    if not tags & {"peer_read", "peer_write"} or not set(r_tags) <= DEVICE_READ_TAGS:
        return None
    if not set(w_tags) <= DEVICE_WRITE_TAGS or read is None or write is None:
        return None
    if not (floor <= read < edge and floor <= write < edge):
        return None
    if read < write * edge or write < read * policy.min_peer_drop:
        return None
    if masked and now is not None:
        return (
            f"but its history puts its seq read at {fmt_ratio(read)}x its peers (this round "
            f"{fmt_ratio(now)}x) and it writes alike ({fmt_ratio(write)}x the peer median; both "
            f"< {edge:.2f} and >= {floor:g}): a slower device, not a slow writer; not drained"
        )
    return (
        f"but it reads and writes alike below its peers (seq read {fmt_ratio(read)}x, seq "
        f"write {fmt_ratio(write)}x the peer medians; both < {edge:.2f} and >= {floor:g}): a "
        "slower device, not a slow reader; not drained"
    )


def masked_writer(write: float | None, policy: VerdictPolicy) -> str | None:
    """A node found only on its seq write (``write``: its write / the peer median) in a
    round whose reads are slow together (a shared cause on the read side): the reason it is
    not drained (signal ``slower_device``), else None. The shared read slowdown hides the
    read that would tell a slower device (slower both ways) from a slow writer, and the
    mission's fault reads slower than it writes. Between ``min_peer_drop`` squared (0.25)
    and ``borderline_level`` (0.71) it is DEGRADED, said, never re-probed; below 0.25 it is
    a slow writer either way. Issue 44, the prolog matrix on the mixed fleet: the slower
    model (0.6x both ways) wrote 0.42-0.47x in the read-slowdown cases with no history,
    and was drained as ``SLOW_WRITE`` in 3 of 3 fresh 7-of-8 screens (2026-12-03)."""
    edge, floor = borderline_level(policy), policy.min_peer_drop**2
    if write is None or not floor <= write < edge:
        return None
    return (
        f"but the round's reads are slow together (a shared cause), which hides whether it "
        f"reads alike: a slower device or a slow writer (seq write {fmt_ratio(write)}x the "
        f"peer median, < {edge:.2f} and >= {floor:g}); not drained"
    )


def at_usual_place(own: float | None, policy: VerdictPolicy) -> bool:
    """At or above ``borderline_level`` (0.71) of its usual place: where it always reads.
    Only such figures are its history (a node part-way down is not learned as usual)."""
    return own is not None and own >= borderline_level(policy)


# Kendall's band of the falling() fit (two-sided): the whole band below zero is a fall at
# one-sided 95 %, which four baselines each lower than the last (0.92x a sweep) reach.
FALL_CONFIDENCE = 0.9
# ... and a fall that matters: the fitted slope loses at least this share over the series.
# A throttled drive reads the same to 1 % in every round; four such readings in falling
# order (849, 848, 846, 841 MB/s) are a significant slope of nothing, and kept the mixed
# fleet's slower model from its place in 6 of 6 history screens (2026-12-03).
FALL_MIN_SHARE = 0.1
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def falling(history: Sequence[float], bw: float) -> bool:
    """Whether the node's baseline seq reads (``history``, newest first, as the store gives
    them) and this one (``bw``) fall steadily: the Theil-Sen band of their log, one step
    per baseline (verdict.trend.fit), wholly below zero, and the fitted fall over them at
    least ``FALL_MIN_SHARE``. Its place is then no place: a drive on its way down learns
    each step as usual, and is judged by the peer rule as any node (usual_doubt). Noise (a
    round 2x faster or slower) does not make a fall."""
    series = [*reversed(history), bw]
    if len(series) < MIN_HISTORY + 1 or min(series) <= 0:
        return False
    points = [Point(_EPOCH + timedelta(days=i), v) for i, v in enumerate(series)]
    band = fit(points, FALL_CONFIDENCE)
    if band is None or band.high >= 0:
        return False
    return math.exp(band.slope * (len(series) - 1)) <= 1 - FALL_MIN_SHARE
