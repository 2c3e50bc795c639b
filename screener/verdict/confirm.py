"""Confirmation: which nodes to re-probe (suspects and healthy references) and how a
re-probe round is merged into the first round's verdicts. Pure, like screener.verdict.judge."""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from screener.policy import VerdictPolicy
from screener.probe_data import NodeProbe, RunSummary, Status, Verdict
from screener.verdict.rules import MIN_HISTORY, fmt_ratio

SLOW = (Status.SLOW_READ, Status.SLOW_WRITE)
# Signal of a slow node a shared cause explained (UNKNOWN, not blamed, not drained).
SHARED_CAUSE_TAG = "shared_cause"
# Signal of a suspect whose re-probe passed the rules but still read below the borderline
BORDERLINE_TAG = "borderline"
# Signal of a peer finding on a node within the gap of its usual place among the round
# (verdict.usual.usual_doubt): DEGRADED, never drained; after a short read the full probe
# decides.
USUAL_PLACE_TAG = "usual_place"
# Signal of a node that reads and writes alike below its peers (verdict.usual.slower_device):
# a slower drive model, DEGRADED until its place is learned, never re-probed nor drained.
SLOWER_DEVICE_TAG = "slower_device"


# A DEGRADED node with only these signals is not re-probed: facts and a read timeout are
# not figures to compare, and a stall mode seen once is evidence a passing re-probe cannot
# undo (stalls are intermittent); it stays DEGRADED and the next screen probes it again.
NOT_SUSPECT_TAGS = frozenset(
    {"facts", "read_timeout", "stalls", "shadow:stalls", SLOWER_DEVICE_TAG}
)

# Findings the sequential read alone can confirm (its bandwidth against peers, the floor,
# the node's own history, a close call), those that need the 4 KiB random read, and those
# that need the write (the write/read ratio needs both). Any other finding (a latency
# tail, slow I/Os, iostat r_await: either read job's) is confirmed by the whole recipe.
SEQ_READ_TAGS = frozenset({"peer_read", "abs_read", "history", "close_call"})
RAND_READ_TAGS = frozenset({"peer_rand", "abs_rand"})
WRITE_TAGS = frozenset({"peer_write", "abs_write", "ratio"})


def is_suspect(v: Verdict) -> bool:
    """A verdict that a performance rule fired for (SLOW_*, or DEGRADED with slow figures).
    A short read's finding on a node at its usual place (``USUAL_PLACE_TAG``) is re-probed
    too: one noisy window (13% of reads >= 100 ms on a loaded host) clears in round 2
    instead of costing a 14 s full probe; found again, the full probe decides it."""
    return v.status in SLOW or (
        v.status == Status.DEGRADED and bool(set(v.signals) - NOT_SUSPECT_TAGS)
    )


def unspared(again: Sequence[str], summary: RunSummary, spared: Collection[str]) -> list[str]:
    """The suspects of ``again`` still to re-probe once the caller has ``spared`` some: only a
    DEGRADED one is spared (its round-1 doubt is already the caller's to settle, e.g. the
    prolog's fresh reference at its usual place); a SLOW one is always confirmed or decided,
    never left to one window."""
    status = {v.node: v.status for v in summary.verdicts}
    return [n for n in again if n not in spared or status.get(n) != Status.DEGRADED]


def counts_as_slow(v: Verdict) -> bool:
    """A suspect with a slow finding, not only a close call nor a short read's finding at
    the node's usual place: what a shared cause counts."""
    quiet = NOT_SUSPECT_TAGS | {"close_call"}
    return is_suspect(v) and USUAL_PLACE_TAG not in v.signals and bool(set(v.signals) - quiet)


def suspects(summary: RunSummary) -> list[str]:
    """Nodes to re-probe before any verdict is final."""
    return [v.node for v in summary.verdicts if is_suspect(v)]


def confirm_jobs(summary: RunSummary, again: Sequence[str], jobs: Sequence[str]) -> tuple[str, ...]:
    """The fio jobs of a confirmation round: per suspect in ``again`` the fewest of the
    recipe's ``jobs`` that can confirm one of its findings, their union in recipe order.
    A node reading at 1/20 fires nearly every read rule; its slow sequential read alone
    confirms it, so the round skips the write and the random read (issue 22). A close call
    is no slow finding: beside one, the others' jobs still run (a 25x random-read fault
    whose seq read was a 0.6x close call was re-probed on the seq read alone and came out
    ``borderline``: issue 44). The sequential read is always run: a probe without it is
    not usable."""
    signals = {v.node: set(v.signals) for v in summary.verdicts}
    need = {"seq_read"}
    for node in again:
        tags = signals.get(node, set())
        if tags & SEQ_READ_TAGS - {"close_call"}:
            continue  # a slow seq read: the seq read alone confirms the node
        if tags & RAND_READ_TAGS and "rand_read" in jobs:
            need.add("rand_read")
        elif tags & WRITE_TAGS and "seq_write" in jobs:
            need.add("seq_write")
        elif "close_call" not in tags:
            return tuple(jobs)
    return tuple(j for j in jobs if j in need)


# A seq read slow through its whole window, not one hang in it (decisive's third evidence):
# its median completion at least 1/decisive_ratio x the peers', over at least this many
# turns of its queue. A hang of the whole window completes about one queue's worth, each
# read having waited the hang: a median as high, from one event.
STEADY_TURNS = 2


def steady_slow(node: str, probes: Sequence[NodeProbe], level: float) -> str | None:
    """Why ``node``'s seq read was slow through its window (``steady`` above), or None: its
    median completion >= 1/``level`` x the median of the other usable nodes' medians, over
    at least STEADY_TURNS x its queue depth completed reads."""
    mine = next((p.seq_read for p in probes if p.node == node), None)
    others = [
        p.seq_read.lat_p50_ns
        for p in probes
        if p.node != node and p.usable and p.seq_read is not None and p.seq_read.lat_p50_ns > 0
    ]
    if mine is None or level <= 0 or not others or mine.iodepth <= 0:
        return None
    peers = statistics.median(others)
    if mine.lat_p50_ns * level < peers or mine.total_ios < STEADY_TURNS * mine.iodepth:
        return None
    return (
        f"slow through its window: median read {mine.lat_p50_ns / peers:.0f}x the peers' "
        f"over {mine.total_ios} reads ({mine.iodepth} in flight)"
    )


def decisive(
    summary: RunSummary,
    usable: int,
    policy: VerdictPolicy,
    earlier: Mapping[str, float] | None = None,
    probes: Sequence[NodeProbe] = (),
) -> dict[str, str]:
    """Suspects round 1 already decided (``decisive_ratio``; 0 = none), each with why:
    SLOW_READ on the peer rule of the sequential read at or below that fraction of the
    round's own peer median, among at least ``min_peers`` usable nodes (no borrowed fleet
    figures) and no shared cause, and a second window that is slow by its own rule: the
    4 KiB random read (its peer rule, at or below ``rand_peer_drop``, its own gap), or a
    read this prolog took before the screen (``earlier``: node -> that read / the node's
    usual, its failed sentinel, at or below ``decisive_ratio``), or that seq read itself
    slow through its window (``steady_slow`` over round 1's ``probes``: most reads 10x the
    peers' wait, not one hang; issue 44: a 1/20 reader capped in bytes on the unpaced
    fleet reads 4 KiB above its gap and was re-probed, 4.7 s). A seq read ten times below
    (the lowest healthy node of 540 prolog verdicts read 0.72x) and a second window below
    its gap are the evidence a re-probe would add. The random read had to be ten times
    below too until 2026-12-03: a 1/20 reader capped in bytes reads 4 KiB at 0.18x of
    peers paced at 20,000 IOPS, was re-probed in every job, and started 11.8-13.7 s after
    submission against issue 44's 10 s."""
    level = policy.decisive_ratio
    read, rand = summary.peer_read_median_mb_s, summary.peer_rand_median_iops
    if level <= 0 or summary.shared_cause or usable < policy.min_peers or not read:
        return {}
    before = earlier or {}
    sure: dict[str, str] = {}
    for v in summary.verdicts:
        tags = set(v.signals)
        if v.status != Status.SLOW_READ or "peer_read" not in tags:
            continue
        if v.read_mb_s is None or v.read_mb_s > level * read:
            continue
        if (
            rand
            and "peer_rand" in tags
            and v.rand_read_iops is not None
            and v.rand_read_iops <= policy.rand_peer_drop * rand
        ):
            sure[v.node] = (
                f"seq read <= {level:g}x and 4k rand read "
                f"{fmt_ratio(v.rand_read_iops / rand)}x the peer medians"
            )
        elif (ratio := before.get(v.node)) is not None and ratio <= level:
            sure[v.node] = (
                f"seq read <= {level:g}x the peer median, after a sentinel read "
                f"{fmt_ratio(ratio)}x its usual"
            )
        elif (steady := steady_slow(v.node, probes, level)) is not None:
            sure[v.node] = f"seq read <= {level:g}x the peer median, {steady}"
    return sure


def decided(summary: RunSummary, sure: Mapping[str, str]) -> RunSummary:
    """``summary`` with the nodes decisive() chose confirmed by round 1, each said why."""
    return replace(
        summary,
        verdicts=tuple(
            replace(v, confirmed=True, reason=f"{v.reason} [decisive in round 1: {sure[v.node]}]")
            if v.node in sure
            else v
            for v in summary.verdicts
        ),
    )


def references(summary: RunSummary, count: int) -> list[str]:
    """Healthy nodes to re-probe beside the suspects, so round 2 is judged on round-2 figures.

    Twice as many as there are suspects plus one and at least ``count`` (0 = none), the
    baseline nodes (OK, or absolved by a shared cause) closest to the peer median first:
    the suspects are then under a third of round 2 unless the references are slow too, as
    in the prolog's escalation (issue 44: two 0.6x nodes beside three references made 40%
    of round 2; with fewer nodes sharing the emulated host, the references read 1.4-1.8x
    faster than in round 1 and both nodes read 0.27-0.38x).
    """
    if count <= 0:
        return []
    slow = suspects(summary)
    ok = [v for v in summary.verdicts if v.baseline and v.node not in slow]
    ok.sort(key=lambda v: (abs(v.z_read) if v.z_read is not None else 0.0, v.node))
    return [v.node for v in ok[: max(count, 2 * len(slow) + 1)]]


def _no_place(v: Verdict) -> str:
    """Why a borderline node was not found at its usual place: none is known yet (a first
    screen of a slower drive model cannot tell it from a node on its way down)."""
    if v.own_place is not None:
        return ""
    return (
        f"; its usual place among its peers is not known yet ({MIN_HISTORY} earlier "
        f"baselines of it, and of the round's nodes, are needed): a slower drive model "
        f"learns it in {MIN_HISTORY} screens"
    )


def confirm(
    first: RunSummary,
    second: RunSummary,
    refs: Sequence[str] = (),
    borderline: float = 0.0,
    short: bool = False,
) -> RunSummary:
    """Merge a re-probe round into the first round's verdicts.

    ``second`` was evaluated over the re-probed suspects beside the re-probed reference
    nodes ``refs`` (or, with no references, beside the others' first-round probes, said in
    the reason). A suspect stays slow only if the re-probe agrees; if the re-probe errored
    it is UNKNOWN (never drain on an error); if it passed, the first finding was transient.
    Each median a merged reason quotes says its round: the run's peer medians (the table's)
    stay round 1's, a confirmed node's figures and the median they were judged against are
    round 2's. The run has a shared cause if either round found one.

    Evidence of both rounds counts: a suspect whose re-probe passed the rules but still read
    below ``borderline`` x the round-2 peer median (0 = off) was slow twice, only not
    clearly enough the second time: DEGRADED (signal ``borderline``, not drained, never
    the fast path), never OK. When round 1 was only a close call its figures are still the
    node's history: a node in the band round after round learns it as its usual place.
    A short read (``short``: the prolog's triage) does not confirm a node it knows no usual
    place of when it read within two gaps of its peers in both rounds (_short_no_place).
    """
    basis = (
        f"round 2 beside {len(refs)} reference nodes"
        if refs
        else "round 2 judged against round-1 figures (no reference nodes)"
    )
    r2 = "round-2" if refs else "mixed-round"
    again = {v.node: v for v in second.verdicts}
    merged: list[Verdict] = []
    for v in first.verdicts:
        if not is_suspect(v) or v.node not in again:
            merged.append(v)
            continue
        v2, kept = _round1_for_skipped(again[v.node], v)
        now = _label(v2.reason, r2)
        if counts_as_slow(v2) and _close_then_gap(v, v2, borderline):
            text = (
                f"borderline: a close call in round 1, below the gap only in round 2: {now} "
                f"[{basis}; {_round1(v, first)}]: slow once, not twice"
            )
            signals = (*v2.signals, BORDERLINE_TAG)
            merged.append(replace(v2, status=Status.DEGRADED, reason=text, signals=signals))
        elif counts_as_slow(v2) and _short_no_place(v, v2, borderline, short):
            low = v2.read_place or 0.0
            text = (
                f"borderline: slow on a short read in both rounds with no usual place known: "
                f"{now} [{basis}; {_round1(v, first)}]; {fmt_ratio(low)}x is within two gaps "
                f"of its peers (>= {borderline**4:g}), where a slower drive model reads: the "
                "full probe decides (it writes)"
            )
            signals = (*v2.signals, BORDERLINE_TAG)
            merged.append(replace(v2, status=Status.DEGRADED, reason=text, signals=signals))
        elif counts_as_slow(v2):  # a close call again is weighed below, with both rounds
            text = f"confirmed: {now} [{basis}; {_round1(v, first)}]"
            signals = (*v2.signals, *(t for t in kept if t not in v2.signals))
            merged.append(replace(v2, confirmed=True, reason=text, signals=signals))
        elif v2.status == Status.UNKNOWN:
            text = f"suspect ({_label(v.reason, 'round-1')}) but re-probe: {now} [{basis}]"
            merged.append(replace(v2, reason=text))
        elif USUAL_PLACE_TAG in v2.signals:  # found again, at its place: the full probe's
            merged.append(replace(v2, reason=f"{now} [{basis}; {_round1(v, first)}]"))
        elif _gap_twice(v, v2, borderline) and not _short_no_place(v, v2, borderline, short):
            low = v2.read_place or 0.0
            text = (
                f"confirmed: below the gap in both rounds: round 2 seq read "
                f"{fmt_ratio(low)}x the {r2} peer median (< {borderline**2:g}; "
                f"z={v2.z_read:.1f} there, short of the peer rule's cut), round 1: "
                f"{_label(v.reason, 'round-1')} [{basis}]"
            )
            signals = (*v.signals, *(t for t in v2.signals if t not in v.signals))
            merged.append(
                replace(
                    v2,
                    status=Status.SLOW_READ,
                    confirmed=True,
                    reason=text,
                    signals=signals,
                    baseline=False,
                )
            )
        elif (
            (ratio := v2.read_place) is not None
            and ratio < borderline
            # a node reading at its usual place among its peers reads low as always
            and not (v2.own_place is not None and v2.own_place >= borderline)
        ):
            text = (
                f"borderline: slower than its peers in both rounds: round 2 seq read "
                f"{fmt_ratio(ratio)}x the {r2} peer median (< {borderline:.2f}), round 1: "
                f"{_label(v.reason, 'round-1')} [{basis}]{_no_place(v2)}"
            )
            merged.append(
                replace(
                    v2,
                    status=Status.DEGRADED,
                    reason=text,
                    # in the close-call band in both rounds (round 1 only a close call): where
                    # the node reads, its history, so a slower drive model learns its place
                    # (rules.close_call); after a slow finding, never
                    baseline=set(v.signals) == {"close_call"},
                    signals=(*v2.signals, BORDERLINE_TAG),
                )
            )
        elif "close_call" in v2.signals:  # both-rounds weighing off: round 2's own call
            merged.append(replace(v2, reason=f"{now} [{basis}; {_round1(v, first)}]"))
        else:
            # round 2's own figure, so a passed re-probe can be weighed afterwards (issue 44:
            # two real slow readers passed theirs after a round-1 median far below the usual)
            ratio = v2.read_place
            at = f" (seq read {fmt_ratio(ratio)}x the {r2} peer median)" if ratio else ""
            text = (
                f"transient: first probe {_label(v.reason, 'round-1')}; re-probe passed{at}"
                f" [{basis}]"
            )
            merged.append(replace(v2, reason=text))
    shared = second if second.shared_cause else first
    return replace(
        first,  # the run's peer medians stay round 1's: those of the table beside the reasons
        verdicts=tuple(merged),
        shared_cause=shared.shared_cause,
        shared_cause_reason=shared.shared_cause_reason,
    )


def _close_then_gap(v1: Verdict, v2: Verdict, borderline: float) -> bool:
    """Round 1 only a close call (0.5-0.71x, ``close_call``), round 2 only the seq read's
    peer rule and at or above ``borderline`` to the fourth (``min_peer_drop`` squared, 0.25x:
    two gaps) of its median: slow once, not twice; off with the both-rounds weighing
    (``borderline`` 0). Issue 44: on the unpaced mixed fleet the slower model was a
    0.57-0.69x close call among eight nodes, then 0.34-0.48x beside 3-5 references that
    read 1.2-2.1x faster with fewer nodes on the host: 3 of its 6 verdicts in fresh
    prolog screens were drains. A node far below in round 2, or with another finding
    there, is confirmed as before."""
    if borderline <= 0 or set(v1.signals) != {"close_call"} or set(v2.signals) != {"peer_read"}:
        return False
    ratio = v2.read_place
    return ratio is not None and ratio >= borderline**4


# The findings of a short read that a slower drive model gives on every read: its seq read
# below the round, with the longer tail and stalls of its pace. The random read, a floor,
# its history and the write say more.
SHORT_PLACE_TAGS = frozenset({"peer_read", "peer_tail", "slow_ios", "stalls", "close_call"})


def _short_no_place(v1: Verdict, v2: Verdict, borderline: float, short: bool) -> bool:
    """A short read (``short``) found the node's seq read slow in both rounds, only against
    its peers (``SHORT_PLACE_TAGS``), at or above ``borderline`` to the fourth (0.25x: two
    gaps) and below ``borderline`` both times, and no usual place of it is known: a slower
    drive model or a 2-4x reader, which a read alone cannot tell apart; the full probe,
    which writes, can (verdict.usual.slower_device). Off with the both-rounds weighing
    (``borderline`` 0). Issue 44, the prolog matrix on the mixed fleet: the slower model,
    with no place learned, read 0.48-0.49x in round 1 and 0.33-0.46x beside 5 references
    that read faster with fewer nodes on the host, and was `SLOW_READ confirmed` in 2 of 5
    fresh jobs (2026-12-05). The mission's faults (8x and slower) read under 0.25x and are
    confirmed as before."""
    if not short or borderline <= 0 or v2.own_place is not None:
        return False
    if not set(v1.signals) <= SHORT_PLACE_TAGS or not set(v2.signals) <= SHORT_PLACE_TAGS:
        return False
    places = (v1.read_place, v2.read_place)
    return all(p is not None and borderline**4 <= p < borderline for p in places)


def _gap_twice(v1: Verdict, v2: Verdict, borderline: float) -> bool:
    """Round 1 found the seq read below the peer gap (``peer_read``: under ``borderline``
    squared, 0.5x, and past the z cut), and round 2 read it below the gap again, though its
    z missed the cut, and not at the node's usual place: below half its peers twice is no
    transient (off with the both-rounds weighing, ``borderline`` 0). Issue 44, the prolog
    matrix on the mixed fleet (2026-12-03 19:50): a 3x reader read 0.41x in round 1 (z
    -11.5 beside the healthy bulk) and 0.32x in round 2, where another suspect and 5
    unpaced references' spread kept its z short, and was ``DEGRADED borderline``."""
    if borderline <= 0 or "peer_read" not in v1.signals or counts_as_slow(v2):
        return False
    gap = borderline**2
    ratio, first = v2.read_place, v1.read_place
    if ratio is None or first is None or v2.z_read is None:
        return False
    at_place = v2.own_place is not None and v2.own_place >= borderline
    return first < gap and ratio < gap and not at_place


def _round1_for_skipped(v2: Verdict, v1: Verdict) -> tuple[Verdict, tuple[str, ...]]:
    """A re-probe's verdict with round 1's figures for the jobs it did not run
    (confirm_jobs: the write, the random read), so the table still shows them, and round
    1's findings on those jobs (a confirmed node keeps them). A re-probe that measured
    nothing is left as it is."""
    if v2.read_mb_s is None:
        return v2, ()
    skipped: set[str] = set()
    if v2.write_mb_s is None:
        v2 = replace(v2, write_mb_s=v1.write_mb_s, ratio=v1.ratio)
        skipped |= WRITE_TAGS
    if v2.rand_read_iops is None:
        v2 = replace(
            v2,
            rand_read_iops=v1.rand_read_iops,
            rand_read_p99_ms=v1.rand_read_p99_ms,
            z_rand=v1.z_rand,
        )
        skipped |= RAND_READ_TAGS
    return v2, tuple(t for t in v1.signals if t in skipped)


def _label(reason: str, rnd: str) -> str:
    """Name the round of the peer medians a reason quotes (``round-2 peer median``)."""
    return reason.replace("peer median", f"{rnd} peer median").replace(
        "the shared level", f"the {rnd} shared level"
    )


def _round1(v: Verdict, first: RunSummary) -> str:
    """The first-round finding in one figure: seq read against the round-1 peer median."""
    median = v.peer_read_mb_s or first.peer_read_median_mb_s
    within = " (outlier within a shared cause)" if first.shared_cause else ""
    if v.read_mb_s is None or not median:
        return f"round 1: {v.status.value}{within}"
    return (
        f"round 1: seq read {v.read_mb_s:,.0f} MB/s = {fmt_ratio(v.read_mb_s / median)}x "
        f"round-1 peer median {median:,.0f} MB/s{within}"
    )
