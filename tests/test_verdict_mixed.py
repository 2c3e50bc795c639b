"""Verdicts on a mixed fleet (issue 44): healthy nodes that spread up to ~2x in one round,
a read slowdown shared with fast writes, short noisy random-read windows. Each case is
built from the issue's figures on the captured fio output (tests/test_verdict_hold) and
screened as the pipeline does (round 1, the re-probe of the jobs confirm_jobs picks
beside references, round 2, the merge)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from screener.errors import ConfigError
from screener.policy import Policy, VerdictPolicy, load_policy
from screener.probe.fio import JOBS
from screener.probe.short import triage_policy
from screener.probe_data import NodeProbe, RunSummary, Status, Verdict
from screener.prolog.triage import ambiguous
from screener.verdict.confirm import (
    confirm_jobs,
    counts_as_slow,
    decided,
    decisive,
    is_suspect,
)
from screener.verdict.judge import (
    confirm,
    evaluate,
    judge_round2,
    references,
    suspects,
)
from screener.verdict.rules import borderline_level, peer_stats, ratio_near_cut
from screener.verdict.usual import falling, tail_ceilings
from tests.test_verdict_hold import MB, POLICY, node

IOPS = 4096 / MB  # node(rand=...) takes MB/s of 4 KiB reads
DEFAULT = Policy()


def screen(
    first: Sequence[NodeProbe],
    again: Mapping[str, NodeProbe] | None = None,
    history: Mapping[str, Sequence[float]] | None = None,
    policy: VerdictPolicy = POLICY,
    jobs: tuple[str, ...] = JOBS,
    tails: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> RunSummary:
    """What pipeline.screen does with the verdict functions: round 1; suspects not decided
    re-probed (``again``'s figures, else round 1's) with the jobs confirm_jobs picks, beside
    references; round 2 judged and merged."""
    hist = history or {}
    summary = evaluate(first, hist, policy, tails=tails)
    redo = suspects(summary)
    if sure := decisive(summary, len(first), policy):
        summary = decided(summary, sure)
        redo = [n for n in redo if n not in sure]
    if not redo:
        return summary
    refs = references(summary, policy.confirm_references)
    ran = confirm_jobs(summary, redo, jobs)
    round1 = {p.node: p for p in first}
    second = [_only((again or {}).get(n, round1[n]), ran) for n in [*redo, *refs]]
    judged = judge_round2(first, second, refs, hist, [], policy, tails)
    return confirm(summary, judged, refs, borderline_level(policy), policy.short_read)


def _only(p: NodeProbe, jobs: tuple[str, ...]) -> NodeProbe:
    """``p`` with only ``jobs`` run (a re-probe of fewer jobs)."""
    return replace(
        p,
        seq_write=p.seq_write if "seq_write" in jobs else None,
        rand_read=p.rand_read if "rand_read" in jobs else None,
    )


def verdicts(summary: RunSummary) -> dict[str, Verdict]:
    return {v.node: v for v in summary.verdicts}


def fleet(reads: Sequence[float], write: float = 1600, rand: float = 380) -> list[NodeProbe]:
    return [node(f"fleet{i:02d}", read=r, write=write, rand=rand) for i, r in enumerate(reads, 1)]


def slow_ones(summary: RunSummary) -> list[str]:
    return [v.node for v in summary.verdicts if v.status in (Status.SLOW_READ, Status.SLOW_WRITE)]


# ---- 1. far outside a wide healthy range ------------------------------------------------

# Healthy nodes read 1,414-2,385 MB/s in one round (issue 44): two groups, as unpaced
# devices on a loaded host gave. Two 4x readers at 434 and 442 MB/s (0.26x the median).
PAIR = [1414, 1420, 434, 1940, 2200, 442, 2300, 2385]


def test_two_4x_readers_in_a_wide_healthy_spread_are_slow() -> None:
    """Before: `OK within peers and thresholds` (z=-3.0: the spread and the pair itself
    inflated the MAD). Against the six nodes at or above 0.5x the median: z=-8.4."""
    probes = fleet(PAIR)
    first = verdicts(evaluate(probes, {}, POLICY))
    st = peer_stats([p.seq_read.bw_bytes for p in probes if p.seq_read], POLICY)
    assert st is not None and -3.5 < st.z(434 * MB) < -2.9  # all nodes: within the noise
    v = first["fleet03"]
    assert v.status == Status.SLOW_READ and v.signals == ("peer_read",), v.reason
    assert v.reason.startswith("seq read 434 MB/s = 0.26x peer median 1,680 MB/s (z=-3.0; z=-")
    assert "beside the 6 nodes >= 0.5x)" in v.reason, v.reason
    final = verdicts(screen(probes))
    assert slow_ones(screen(probes)) == ["fleet03", "fleet06"]
    assert final["fleet03"].confirmed and final["fleet06"].confirmed
    said = final["fleet03"].reason  # beside 5 references: the pair under a third of round 2
    assert said.startswith("confirmed: seq read 434 MB/s = 0.26x round-2 peer median"), said
    assert "[round 2 beside 5 reference nodes;" in said, said
    assert all(final[n].status == Status.OK for n in final if n not in ("fleet03", "fleet06"))


def test_two_4x_readers_with_history_just_above_the_history_cut() -> None:
    """The history rule's 0.25x passes 434 MB/s against a usual 1,700 (0.255x); the node's
    own place (0.26x its usual against the round) says the same as the peers."""
    probes = fleet(PAIR)
    history = {p.node: [(p.seq_read.bw_bytes if p.seq_read else 0.0)] * 5 for p in probes}
    history["fleet03"] = history["fleet06"] = [1700 * MB] * 5
    v = verdicts(evaluate(probes, history, POLICY))["fleet03"]
    assert "history" not in v.signals and v.status == Status.SLOW_READ, v.reason


# A 3x reader at 587 MB/s (0.42x the median 1,398) among seven healthy nodes spread evenly
# over 2x: z=-2.3 against all, -2.6 against the healthy seven (a flat spread's MAD is a
# quarter of its width), but 0.59x the slowest healthy node.
THIRD = [1000, 587, 1150, 1300, 1496, 1700, 1900, 2000]


def test_a_3x_reader_below_a_flat_healthy_range_is_slow() -> None:
    probes = fleet(THIRD)
    v = verdicts(evaluate(probes, {}, POLICY))["fleet02"]
    assert v.status == Status.SLOW_READ and v.signals == ("peer_read",), v.reason
    assert "= 0.42x peer median 1,398 MB/s (z=-2.3; below the range of the 7 nodes" in v.reason
    assert slow_ones(screen(probes)) == ["fleet02"]


def test_a_3x_reader_is_also_found_by_its_own_usual_place() -> None:
    """Where neither peer spread says it (a wider healthy spread), its own history does:
    0.42x the peers and 0.33x its usual 1,761 MB/s against a round at its usual level."""
    reads = [900, 587, 1100, 1300, 1496, 1800, 2000, 2200]
    probes = fleet(reads)
    assert verdicts(evaluate(probes, {}, POLICY))["fleet02"].status == Status.OK
    history = {p.node: [(p.seq_read.bw_bytes if p.seq_read else 0.0)] * 5 for p in probes}
    history["fleet02"] = [1761 * MB] * 5
    v = verdicts(evaluate(probes, history, POLICY))["fleet02"]
    assert v.status == Status.SLOW_READ and v.signals == ("peer_read",), v.reason
    assert "; 0.33x its own usual place)" in v.reason, v.reason


@pytest.mark.parametrize("reads", [PAIR[:2] + PAIR[3:5] + PAIR[6:], THIRD[:1] + THIRD[2:]])
def test_the_wide_healthy_fleets_alone_are_all_ok(reads: list[float]) -> None:
    assert {v.status for v in evaluate(fleet(reads), {}, POLICY).verdicts} == {Status.OK}


def test_a_mixed_partition_at_0_6x_is_not_slow() -> None:
    """Two healthy nodes of a slower model (0.6x the rest) are above the gap: never
    peer_read, whatever the spread of the others."""
    reads = [1000, 1010, 990, 1020, 600, 980, 1005, 610]
    got = verdicts(evaluate(fleet(reads), {}, POLICY))
    assert not any("peer_read" in v.signals for v in got.values())
    assert slow_ones(screen(fleet(reads))) == []


# ---- 2. a read slowdown shared by the fleet, writes fast ---------------------------------

# Every node read 288-299 MB/s and wrote ~2,100: write/read 7.0-7.3x on every node.
SHARED_READS = [288, 290, 299, 291, 295, 293, 289, 296]


def _tail(p: NodeProbe, factor: float) -> NodeProbe:
    """``p`` with its seq-read tail ``factor`` x longer (a throttle's burst: peer_tail)."""
    assert p.seq_read is not None
    job = p.seq_read
    longer = replace(job, lat_p99_ns=job.lat_p99_ns * factor, lat_p999_ns=job.lat_p999_ns * factor)
    return replace(p, seq_read=longer)


def _shared(
    reads: Sequence[float], suspects_: Sequence[int]
) -> tuple[list[NodeProbe], dict[str, NodeProbe]]:
    """Round 1 with the fleet's reads at ~290 MB/s and writes at ~2,100 MB/s, the nodes
    ``suspects_`` (1-based) with a tail outlier (what made fleet01 and fleet08 suspects);
    round 2: the suspects read and write as before (7.0-7.3x), the references, five nodes
    writing at once instead of eight, wrote slower: 4.6-4.9x."""
    probes = fleet(reads, write=2100)
    for i in suspects_:
        probes[i - 1] = _tail(probes[i - 1], 8)
    again = {p.node: node(p.node, read=p.seq_read.mb_s, write=1380) for p in probes if p.seq_read}
    for i in suspects_:
        again[f"fleet{i:02d}"] = node(f"fleet{i:02d}", read=reads[i - 1], write=2100)
    return probes, again


def test_a_fleet_wide_read_slowdown_with_fast_writes_drains_nobody() -> None:
    """Before: fleet01 and fleet08 `SLOW_READ confirmed: write/read 7.3x > 5x [round 2
    beside 3 reference nodes; round 1: seq read 288 MB/s = 1.00x round-1 peer median 289
    MB/s (outlier within a shared cause)]`: in round 2 their ratio stood alone."""
    probes, again = _shared(SHARED_READS, (1, 8))
    first = evaluate(probes, {}, POLICY)
    assert first.shared_cause, first.shared_cause_reason
    assert "8/8 nodes read over 5x slower than they write (the round's median write/read 7." in (
        first.shared_cause_reason
    )
    got = verdicts(first)
    assert not any("ratio" in v.signals for v in got.values())
    assert all(got[n].status == Status.UNKNOWN for n in got if n not in ("fleet01", "fleet08"))
    final = screen(probes, again)
    assert slow_ones(final) == [], [v.reason for v in final.verdicts]
    assert final.shared_cause


def test_every_node_over_the_ratio_is_a_shared_cause_not_a_slow_node() -> None:
    got = verdicts(evaluate(fleet(SHARED_READS, write=2100), {}, POLICY))
    assert {v.status for v in got.values()} == {Status.UNKNOWN}
    assert all(v.baseline and "shared_cause" in v.signals for v in got.values())


def test_a_7_of_8_read_slowdown_with_fast_writes_drains_nobody() -> None:
    """Before: fleet04 confirmed SLOW_READ on its write/read ratio alone in round 2."""
    reads = list(SHARED_READS)
    reads[4] = 1800  # fleet05 untouched
    probes, again = _shared(reads, (4,))
    final = screen(probes, again)
    assert slow_ones(final) == [], [v.reason for v in final.verdicts]
    assert verdicts(final)["fleet05"].status == Status.OK


def test_an_outlier_ratio_within_the_crowd_is_still_slow() -> None:
    """A node that reads 1/20 of the shared level (write/read 146x against the round's 7x)
    is an outlier of the round's ratios, and of its reads."""
    reads = list(SHARED_READS)
    reads[2] = 14.4
    v = verdicts(evaluate(fleet(reads, write=2100), {}, POLICY))["fleet03"]
    assert v.status == Status.SLOW_READ and {"peer_read", "ratio"} <= set(v.signals), v.reason
    assert "write/read 145.8x > 5x and 20.2x the round's median 7.2x" in v.reason, v.reason


def test_a_lone_ratio_still_fires_without_a_crowd() -> None:
    """One node of eight at 7x is no crowd: the ratio holds on its own (seed 001)."""
    probes = fleet([1500] * 8, write=1500)
    probes[1] = node("fleet02", read=290, write=2100)
    v = verdicts(evaluate(probes, {}, POLICY))["fleet02"]
    assert "ratio" in v.signals and v.reason.count("write/read 7.2x > 5x") == 1


# The prolog matrix's fleet_read_6x on the unpaced mixed fleet (2026-12-03 15:02): the round
# at 5.0-5.4x, half of it over 5x (no crowd yet), and 2 of 8 nodes reading 1.00x their peers
# drained on `write/read 5.2x > 5x` alone.
NEAR_CUT = [4.9, 5.0, 5.1, 5.2, 4.95, 5.3, 4.8, 5.05]


def test_a_ratio_near_the_rounds_own_is_no_finding() -> None:
    probes = [
        node(f"fleet{i:02d}", read=300, write=300 * r, rand=380) for i, r in enumerate(NEAR_CUT, 1)
    ]
    got = verdicts(evaluate(probes, {}, POLICY))
    assert not any("ratio" in v.signals for v in got.values()), [v.reason for v in got.values()]
    assert slow_ones(screen(probes)) == []
    # a slow reader among them is still an outlier of the round's ratios
    probes[2] = node("fleet03", read=60, write=300 * 5.1, rand=380)
    v = verdicts(evaluate(probes, {}, POLICY))["fleet03"]
    assert v.status == Status.SLOW_READ and "ratio" in v.signals, v.reason
    assert "write/read 25.5x > 5x and 5.1x the round's median 5.0x" in v.reason, v.reason


@pytest.mark.parametrize(
    ("ratios", "near"),
    [
        (NEAR_CUT, True),
        ([1.0, 1.1, 0.9, 1.0, 7.0, 1.05, 1.0, 0.95], False),  # one slow reader: the cut
        ([1.0, 300.0, 1.03, 300.0], False),  # half a round at 1/300 does not lift it
        ([3.5, 3.6, 3.7, 3.4], False),  # under 0.71 x the cut (3.54)
        ([5.0, 5.0, 5.0], False),  # fewer than min_peers: the cut alone
    ],
)
def test_ratio_near_cut_is_the_rounds_lower_median(ratios: list[float], near: bool) -> None:
    assert ratio_near_cut(ratios, POLICY) is near


# ---- 3. and 4. the 4 KiB random read ------------------------------------------------------


def _rand_fleet(
    rand_iops: float, seq: float, again_iops: float, again_seq: float, wide: bool = False
) -> tuple[list[NodeProbe], dict[str, NodeProbe]]:
    """A round of 8 (seq ~2,470 MB/s, quiet or ``wide`` +-15%; 4k ~92,929 IOPS); fleet02
    reads ``seq`` and ``rand_iops``, then ``again_seq`` and ``again_iops`` in round 2
    (read-only, as the prolog's triage)."""
    reads = [2470 * (1 + 0.01 * (i % 4)) for i in range(8)]
    if wide:
        reads = [2100, 2300, 2470, 2700, 2900, 2470, 2200, 2600]
    probes = [
        replace(
            node(f"fleet{i:02d}", read=r, rand=92_929 * (1 + 0.02 * (i % 3)) * IOPS), seq_write=None
        )
        for i, r in enumerate(reads, 1)
    ]
    probes[1] = replace(node("fleet02", read=seq, rand=rand_iops * IOPS), seq_write=None)
    again = {
        "fleet02": replace(node("fleet02", read=again_seq, rand=again_iops * IOPS), seq_write=None)
    }
    return probes, again


def test_a_25x_random_read_fault_with_a_close_call_seq_read_is_confirmed_slow() -> None:
    """Before: DEGRADED `borderline`: the close call on the seq read (0.62x) made the
    re-probe run the seq read alone, so the 25x random read was never looked at again."""
    probes, again = _rand_fleet(92_929 / 25, 1540, 92_929 / 25, 1540)
    first = verdicts(evaluate(probes, {}, POLICY))["fleet02"]
    assert set(first.signals) >= {"peer_rand", "close_call"}, first.reason
    final = verdicts(screen(probes, again, jobs=("seq_read", "rand_read")))["fleet02"]
    assert final.status == Status.SLOW_READ and final.confirmed, final.reason
    assert (
        final.reason.startswith("confirmed: ") and "4k rand read 3,717 IOPS = 0.04x" in final.reason
    )


def test_a_25x_random_read_fault_with_a_normal_seq_read_is_confirmed_slow() -> None:
    probes, again = _rand_fleet(92_929 / 25, 2480, 92_929 / 25, 2480)
    final = verdicts(screen(probes, again, jobs=("seq_read", "rand_read")))["fleet02"]
    assert final.status == Status.SLOW_READ and final.confirmed, final.reason


def test_two_noisy_random_read_windows_of_a_healthy_node_do_not_drain_it() -> None:
    """Before: `SLOW_READ confirmed: 4k rand read 31,833 IOPS = 0.34x round-2 peer median
    92,929 IOPS (z=-5.2) [round 2 beside 3 reference nodes; round 1: seq read 1,704 MB/s =
    0.69x ...]`. 0.3x then 0.34x on 4k reads alone is within the random read's noise."""
    probes, again = _rand_fleet(27_900, 1704, 31_833, 2600, wide=True)
    first = verdicts(evaluate(probes, {}, POLICY))["fleet02"]
    assert first.status == Status.OK and first.signals == (), first.reason
    final = verdicts(screen(probes, again, jobs=("seq_read", "rand_read")))["fleet02"]
    assert final.status == Status.OK, final.reason
    # after a close call on the seq read (a quieter round), round 2 passes it as well
    probes, again = _rand_fleet(27_900, 1704, 31_833, 2600)
    final = verdicts(screen(probes, again, jobs=("seq_read", "rand_read")))["fleet02"]
    assert final.status == Status.OK and final.reason.startswith("transient: "), final.reason
    # and if round 2 reads the random read too: 0.34x is still no finding
    every = replace(POLICY, confirm_every_job=True)
    probes2 = list(probes)
    probes2[1] = replace(probes[1], rand_read=again["fleet02"].rand_read)
    v = verdicts(evaluate(probes2, {}, every))["fleet02"]
    assert "peer_rand" not in v.signals, v.reason


def test_rand_peer_drop_is_the_random_reads_gap() -> None:
    probes, _ = _rand_fleet(27_900, 2480, 27_900, 2480)
    assert verdicts(evaluate(probes, {}, POLICY))["fleet02"].status == Status.OK
    strict = replace(POLICY, rand_peer_drop=0.5)
    v = verdicts(evaluate(probes, {}, strict))["fleet02"]
    assert v.signals == ("peer_rand",) and "0.29x peer median" in v.reason, v.reason


# ---- 5. a slower model in a short read: the full probe decides -----------------------------

# The unpaced mixed fleet (bench/time_to_start.py --fleet mixed, 2026-11-28): the triage's
# QD8 window read the healthy nodes at ~1,790 MB/s and the slower model's two nodes, set at
# 0.6x by a fixed-rate throttle, at 867 and 847 MB/s (0.48x, 0.47x) with a 5x p99; their
# sweeps' full probe had read them at 892 and 819 MB/s beside a healthy 1,487 (0.6x, OK).
# They were drained: node05 on `seq read 0.50x`, node07 on `seq read p99 5x`.
MIXED_TRIAGE = [1760, 1800, 1830, 1790, 867, 1810, 847, 1775]
MIXED_USUAL = [1487, 1490, 1480, 1495, 892, 1485, 819, 1488]
SHORT = replace(POLICY, short_read=True)


def _mixed(reads: Sequence[float] = MIXED_TRIAGE) -> tuple[list[NodeProbe], dict[str, list[float]]]:
    probes = fleet(reads)
    probes[6] = _tail(probes[6], 5)
    history = {p.node: [u * MB] * 3 for p, u in zip(probes, MIXED_USUAL, strict=True)}
    return probes, history


def test_a_slower_model_at_its_usual_place_is_the_full_probes_to_decide() -> None:
    probes, history = _mixed()
    got = verdicts(screen(probes, history=history, policy=SHORT))
    for name in ("fleet05", "fleet07"):
        v = got[name]
        assert v.status == Status.DEGRADED and v.signals[-1] == "usual_place", v.reason
        assert is_suspect(v) and not counts_as_slow(v)  # re-probed; never a shared cause
        assert "reads at its usual place among its peers (" in v.reason, v.reason
    assert "peer_read" in got["fleet05"].signals and "peer_tail" in got["fleet07"].signals
    assert slow_ones(screen(probes, history=history, policy=SHORT)) == []
    summary = screen(probes, history=history, policy=SHORT)
    assert set(ambiguous(summary, replace(DEFAULT, verdict=SHORT))) == {"fleet05", "fleet07"}


def test_the_full_probe_judges_a_seq_read_at_the_usual_place_and_an_unknown_tail() -> None:
    """Without the short-read flag (the full probe, ``screener screen``): fleet05's only
    finding, its seq read at 0.48x, is where it usually reads (0.81x of its place): OK and
    its history, the finding quoted. fleet07's 5x p99 is not a tail its history knows
    (no ceiling learned under this recipe): judged as ever. The flag is the triage's alone
    (prolog.triage_policy sets it)."""
    probes, history = _mixed()
    got = verdicts(evaluate(probes, history, POLICY))
    v = got["fleet05"]
    assert v.status == Status.OK and v.baseline and not v.signals, v.reason
    assert v.reason.startswith("seq read 867 MB/s = 0.49x peer median 1,782 MB/s"), v.reason
    assert v.reason.endswith(", within its usual place among its peers (0.97x)"), v.reason
    assert got["fleet07"].status == Status.SLOW_READ and "peer_tail" in got["fleet07"].signals
    assert triage_policy(DEFAULT).verdict.short_read and not DEFAULT.verdict.short_read


# bench/time_to_start.py --fleet mixed, 2026-12-03 (docs/performance.md): the prolog's full
# probe read the throttled model at its own baseline (~470 MB/s) while the unthrottled peers,
# fewer at once than at calibration, read 1,273 MB/s against 734-865: node05 was `SLOW_READ
# confirmed: seq read 479 MB/s = 0.38x round-2 peer median 1,273 MB/s (z=-13.5)` and drained
# in 5 of 6 jobs, after the triage had deferred it (`0.64x, >= 0.5`).
FULL_READS = [1240, 1300, 1273, 1290, 479, 1250, 462]
FULL_USUAL = [780, 865, 734, 820, 470, 800, 455]


def _full(reads: Sequence[float] = FULL_READS) -> tuple[list[NodeProbe], dict[str, list[float]]]:
    probes = fleet(reads)
    history = {p.node: [u * MB] * 3 for p, u in zip(probes, FULL_USUAL, strict=True)}
    return probes, history


def test_the_full_probe_does_not_drain_a_slower_model_at_its_own_level() -> None:
    """The peers read 1.6x their history (fewer at once), the model 1.0x its own: the
    round's speed-up does not move its place (rules.own_place)."""
    probes, history = _full()
    first = verdicts(evaluate(probes, history, POLICY))
    for name in ("fleet05", "fleet07"):
        v = first[name]
        assert v.status == Status.OK and v.baseline and not v.signals, v.reason
        assert "x peer median 1,250 MB/s (z=-1" in v.reason, v.reason
        assert v.reason.endswith(", within its usual place among its peers (1.02x)"), v.reason
    assert slow_ones(screen(probes, history=history)) == []


def test_within_the_gap_of_its_own_level_it_is_degraded_never_drained_nor_learned() -> None:
    """The model at 0.70x its own level (330 of 470 MB/s: 0.26x the peers): not clearly a
    drop by its own yardstick, not where it usually reads either."""
    reads = list(FULL_READS)
    reads[4] = 330
    probes, history = _full(reads)
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.status == Status.DEGRADED and v.signals == ("peer_read", "usual_place"), v.reason
    assert "within the gap of its usual place among its peers (0.70x, >= 0.5), and its " in v.reason
    assert "history puts it at 0.60x its peers (>= 0.25): its own place, not a drop" in v.reason
    assert not v.baseline  # part-way below its place: never learned as its place
    got = verdicts(screen(probes, history=history))["fleet05"]
    assert got.status == Status.DEGRADED and not got.confirmed, got.reason


@pytest.mark.parametrize(
    ("read", "usual", "own"),
    [
        (380, 800, 0.475),  # a normal node at 0.48x its own level (0.30x the peers)
        (200, 470, 0.43),  # the slower model at 0.43x its own level
    ],
)
def test_the_full_probe_still_drains_a_node_below_the_gap_of_its_place(
    read: float, usual: float, own: float
) -> None:
    reads = list(FULL_READS)
    reads[4] = read
    probes, history = _full(reads)
    history["fleet05"] = [usual * MB] * 3
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.status == Status.SLOW_READ and "usual_place" not in v.signals, v.reason
    assert v.own_place == pytest.approx(own, abs=0.005) and "z=-" in v.reason, v.reason
    assert slow_ones(screen(probes, history=history)) == ["fleet05"]


def test_the_full_probe_spares_no_node_whose_history_is_two_gaps_below_its_peers() -> None:
    """A node whose usual level is 0.22x its peers' (its history learned a fault, step by
    step), read at that level: at its own place, but no drive model reads under a quarter
    of its peers (``min_peer_drop`` squared)."""
    reads = list(FULL_READS)
    reads[4] = 180
    probes, history = _full(reads)
    history["fleet05"] = [175 * MB] * 3  # 0.22x the median usual level 800
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.own_place is not None and v.own_place >= 0.71
    assert v.status == Status.SLOW_READ and "usual_place" not in v.signals, v.reason


# tests/test_trend_cluster.py: node01's read throttle tightens 0.92x a sweep; each sweep it
# read at its own place (0.85x of its last baselines' median) and was learned, 0.45x its
# peers before it was SLOW, when the full probe spared a node at its own place.
CREEP = [470 / 0.92**k for k in range(1, 6)]  # its last 5 baselines, newest first


def test_a_node_creeping_down_is_not_spared_at_its_own_place() -> None:
    """Its baselines fall step by step: at its own place (0.89x their median) it is still
    0.37x the peers, SLOW, and the same read with a steady history is spared."""
    reads = list(FULL_READS)
    reads[4] = 470
    probes, history = _full(reads)
    history["fleet05"] = [u * MB for u in CREEP]
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.own_place is not None and v.own_place >= 0.71, v.own_place
    assert v.status == Status.SLOW_READ and "usual_place" not in v.signals, v.reason
    assert slow_ones(screen(probes, history=history)) == ["fleet05"]
    steady = sorted(CREEP)  # the same figures in another order: no fall
    history["fleet05"] = [steady[i] * MB for i in (2, 0, 4, 1, 3)]
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.status == Status.OK and v.baseline, v.reason


@pytest.mark.parametrize(
    ("history", "read", "fall"),
    [
        ([470 / 0.92**k for k in range(1, 6)], 470, True),  # 0.92x a baseline
        ([470 / 0.92**k for k in range(1, 4)], 470, True),  # the fewest that can say so
        ([470 / 0.92**k for k in range(1, 3)], 470, False),  # too few to say (MIN_HISTORY)
        ([610, 480, 700, 520, 650], 455, False),  # a 1.5x-noisy level: no steady fall
        ([470] * 5, 470, False),  # flat (ties)
        ([470 * 0.92**k for k in range(1, 6)], 470, False),  # rising
        ([846, 848, 849], 841, False),  # a throttled drive to 1 %: a fall of nothing
        ([470 / 0.97**k for k in range(1, 6)], 470, True),  # 0.97x a baseline: 14 % over 6
        ([470 / 0.985**k for k in range(1, 6)], 470, False),  # 0.985x: 7 %, not yet
    ],
)
def test_falling_is_a_steady_fall_of_the_baselines(
    history: list[float], read: float, fall: bool
) -> None:
    assert falling(history, read) is fall


@pytest.mark.parametrize(("read", "own"), [(90, "0.08"), (430, "0.40")])
def test_a_slower_model_that_dropped_from_its_place_is_still_slow(read: float, own: str) -> None:
    """A 1/20 reader, and the slower model at half its usual place (0.24x the peers)."""
    reads = list(MIXED_TRIAGE)
    reads[4] = read
    probes, history = _mixed(reads)
    v = verdicts(evaluate(probes, history, SHORT))["fleet05"]
    assert v.status == Status.SLOW_READ and "usual_place" not in v.signals, v.reason
    assert f"; {own}x its own usual place" in v.reason or "z=" in v.reason, v.reason
    assert slow_ones(screen(probes, history=history, policy=SHORT)) == ["fleet05"]


def test_short_read_is_not_a_config_key(tmp_path: Path) -> None:
    cfg = tmp_path / "screener.toml"
    cfg.write_text("[verdict]\nshort_read = true\n")
    with pytest.raises(ConfigError, match=r"^unknown config key verdict\.short_read$"):
        load_policy(cfg)


def _learned(
    probes: Sequence[NodeProbe], times: float = 1.0
) -> dict[str, list[tuple[float, float]]]:
    """Each node's tails of 3 earlier triages as its baseline: ``times`` x today's."""
    out = {}
    for p in probes:
        assert p.seq_read is not None
        out[p.node] = [(p.seq_read.lat_p99_ns * times, p.seq_read.lat_p999_ns * times)] * 3
    return out


def test_a_slower_model_whose_place_and_tail_are_learned_reads_as_usual() -> None:
    """Three triages later (each DEGRADED usual_place, a baseline, the full probe passing
    it), the node's place and tail under the triage's own recipe are known: no finding,
    no full probe. Its figures are history again (baseline)."""
    probes, _ = _mixed()
    history = {p.node: [p.seq_read.bw_bytes] * 3 for p in probes if p.seq_read}
    got = verdicts(screen(probes, history=history, policy=SHORT, tails=_learned(probes)))
    for name in ("fleet05", "fleet07"):
        v = got[name]
        assert v.status == Status.OK and v.baseline and not v.signals, v.reason
        assert v.reason.startswith("within its usual place among its peers (1.0"), v.reason
    summary = screen(probes, history=history, policy=SHORT, tails=_learned(probes))
    assert ambiguous(summary, replace(DEFAULT, verdict=SHORT)) == []


def test_a_tail_longer_than_the_nodes_usual_is_still_a_finding() -> None:
    """fleet07's p99 at 5x the peers was 2.5x its usual (a stall new to it): the full
    probe's to decide, as before it was learned; within 1.41x of its usual: its own."""
    probes, _ = _mixed()
    history = {p.node: [p.seq_read.bw_bytes] * 3 for p in probes if p.seq_read}
    usual = _learned(probes)
    usual["fleet07"] = _learned(probes, 1 / 2.5)["fleet07"]
    v = verdicts(evaluate(probes, history, SHORT, tails=usual))["fleet07"]
    assert v.status == Status.DEGRADED and "peer_tail" in v.signals, v.reason
    assert "usual_place" in v.signals and v.baseline
    usual["fleet07"] = _learned(probes, 1 / 1.3)["fleet07"]
    assert verdicts(evaluate(probes, history, SHORT, tails=usual))["fleet07"].status == Status.OK


def test_a_learned_slower_model_that_drops_is_slow() -> None:
    reads = list(MIXED_TRIAGE)
    reads[4] = 300  # 0.17x the peers, 0.35x its usual place
    probes, _ = _mixed(reads)
    history = {p.node: [p.seq_read.bw_bytes] * 3 for p in probes if p.seq_read}
    history["fleet05"] = [867 * MB] * 3
    v = verdicts(evaluate(probes, history, SHORT, tails=_learned(probes)))["fleet05"]
    assert v.status == Status.SLOW_READ and not v.baseline, v.reason


def test_tail_ceilings_need_min_history_and_follow_a_loaded_round() -> None:
    probes, _ = _mixed()
    assert (
        tail_ceilings(probes, {p.node: _learned(probes)[p.node][:2] for p in probes}, SHORT) == {}
    )
    calm = tail_ceilings(probes, _learned(probes), SHORT)
    loaded = tail_ceilings(probes, _learned(probes, 1 / 2), SHORT)  # every tail 2x today
    p = probes[0].seq_read
    assert p is not None
    assert calm["fleet01"][0] == pytest.approx(p.lat_p99_ns / borderline_level(SHORT))
    # the round's tails are 2x their usual: everyone's ceiling moves with it
    assert loaded["fleet01"][0] == pytest.approx(p.lat_p99_ns / 2 * 2 / borderline_level(SHORT))


def test_a_round_faster_than_its_history_does_not_move_a_nodes_place() -> None:
    """bench/time_to_start.py --fleet mixed, 2026-11-28 16:32: the triage read the healthy
    nodes 1.45x faster than the sweeps' full probe had, the throttled node05 no faster:
    0.38x its peers, 0.92x its own level. Before 2026-12-03 that was 0.67x of its place
    (its level over the round's 1.45x): within the gap, a full probe in every job, and
    the full probe drained it. Now: at its place, learned under the triage's recipe
    (baseline), and OK in the full probe."""
    reads = [1666, 2404, 2139, 1409, 605, 1523, 640, 1812]
    usual = [1243, 1078, 1107, 1057, 659, 1086, 659, 1175]
    probes = fleet(reads)
    history = {p.node: [u * MB] * 3 for p, u in zip(probes, usual, strict=True)}
    v = verdicts(screen(probes, history=history, policy=SHORT))["fleet05"]
    assert v.status == Status.DEGRADED and v.signals[-1] == "usual_place", v.reason
    assert v.baseline
    assert "at its usual place among its peers (0.92x, >= 0.5)" in v.reason, v.reason
    full = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert full.status == Status.OK and full.baseline, full.reason


def test_a_short_reads_finding_at_the_usual_place_that_clears_in_round_2_is_transient() -> None:
    """A noisy window (the requeued attempt's node02: 13% of reads >= 100 ms, at its usual
    place) is re-probed, not sent to a 14 s full probe; round 2 read it at 0.56x its peers,
    its usual place: transient, not borderline."""
    probes, history = _mixed()
    again = {"fleet05": node("fleet05", read=1000, write=1600, rand=380)}
    v = verdicts(screen(probes, again, history=history, policy=SHORT))["fleet05"]
    assert v.status == Status.OK and v.reason.startswith("transient: first probe"), v.reason


# The prolog matrix on the mixed fleet, fresh stores (bench/repeatability.py --prolog,
# 2026-12-05 07:00): the slower model (node05, node07; 0.6x both ways) read 0.48-0.49x
# in the triage's round 1 and 0.46x beside 5 references that read faster in round 2;
# with no place learned it was `SLOW_READ confirmed`, a drain, in 2 of 5 jobs.
NO_PLACE_R1 = [1700, 1750, 1739, 1780, 847, 1720, 860, 1760]
NO_PLACE_R2 = [1818, 1830, 1805, 1840, 832, 1822, 841, 1810]


def _no_place(
    r1: Sequence[float] = NO_PLACE_R1, r2: Sequence[float] = NO_PLACE_R2, rand: float = 380
) -> tuple[list[NodeProbe], dict[str, NodeProbe]]:
    """Round 1 and the re-probe's figures (fleet05's 4 KiB reads at ``rand`` MB/s in
    both); fleet07 with its throttle's 5x tail."""
    first = [
        node(p.node, read=r, write=1600, rand=rand if i == 4 else 380)
        for i, (p, r) in enumerate(zip(fleet(r1), r1, strict=True))
    ]
    second = [
        node(p.node, read=r, write=1600, rand=rand if i == 4 else 380)
        for i, (p, r) in enumerate(zip(fleet(r2), r2, strict=True))
    ]
    first[6], second[6] = _tail(first[6], 5), _tail(second[6], 5)
    return first, {p.node: p for p in second}


def test_a_short_read_with_no_place_known_sends_a_slower_model_to_the_full_probe() -> None:
    """Both rounds within two gaps of the peers (0.25-0.71x), only peer findings, no usual
    place: DEGRADED borderline, left for the full probe (which writes), never a drain."""
    first, again = _no_place()
    summary = screen(first, again, policy=SHORT)
    got = verdicts(summary)
    for name in ("fleet05", "fleet07"):
        v = got[name]
        assert v.status == Status.DEGRADED and v.signals[-1] == "borderline", v.reason
        assert "with no usual place known" in v.reason and "full probe decides" in v.reason
        assert not v.baseline  # a node part-way down is never learned as its place
    assert "peer_tail" in got["fleet07"].signals
    assert slow_ones(summary) == []
    assert {"fleet05", "fleet07"} <= set(ambiguous(summary, replace(DEFAULT, verdict=SHORT)))
    # the full probe's rules are as they were: its write tells a slower device (elsewhere)
    assert set(slow_ones(screen(first, again, policy=POLICY))) == {"fleet05", "fleet07"}


def _around(level: float, fleet05: float) -> list[float]:
    """Eight reads near ``level``, fleet05's at ``fleet05`` x it."""
    return [level * (fleet05 if i == 4 else 1 + 0.01 * (i % 3)) for i in range(8)]


@pytest.mark.parametrize(
    ("why", "r1", "r2", "rand", "history"),
    [
        ("a 4x reader", 0.22, 0.21, 380, False),
        ("below two gaps in round 2 only", 0.48, 0.22, 380, False),
        ("a random-read fault beside it", 0.48, 0.46, 15, False),
        ("a drop from its known place at par", 0.48, 0.46, 380, True),
    ],
)
def test_what_a_short_read_still_confirms_with_no_place_or_a_drop(
    why: str, r1: float, r2: float, rand: float, history: bool
) -> None:
    first, again = _no_place(_around(1739, r1), _around(1818, r2), rand)
    hist = {p.node: [1739 * MB] * 3 for p in first} if history else None
    v = verdicts(screen(first, again, history=hist, policy=SHORT))["fleet05"]
    assert v.status == Status.SLOW_READ and v.confirmed, (why, v.reason)


# ---- a slower device: reads and writes alike below the round ------------------------------

# The unpaced mixed fleet's slower model (bench/repeatability.py, 2026-12-03 15:02): read
# and write paced at 0.6x, it read 0.47-0.58x its peers in round 1 and wrote 0.39x; with no
# history it was drained in 6 of 6 fresh prolog screens.
DEVICE_READS = [1000, 1010, 990, 1020, 470, 980, 1005, 580]
DEVICE_WRITES = [1030, 1000, 1050, 990, 401, 1020, 1010, 401]


def _device(
    reads: Sequence[float] = DEVICE_READS, writes: Sequence[float] = DEVICE_WRITES
) -> list[NodeProbe]:
    return [
        node(f"fleet{i:02d}", read=r, write=w, rand=380)
        for i, (r, w) in enumerate(zip(reads, writes, strict=True), 1)
    ]


def test_a_slower_device_with_no_history_is_degraded_never_drained() -> None:
    probes = _device()
    got = verdicts(evaluate(probes, {}, POLICY))
    v = got["fleet05"]  # read 0.47x (peer_read), write 0.40x (peer_write)
    assert v.status == Status.DEGRADED and v.signals == ("slower_device",), v.reason
    assert v.reason.startswith("seq read 470 MB/s = 0.47x peer median"), v.reason
    assert "; seq write 401 MB/s = 0.40x peer median 1,005 MB/s" in v.reason, v.reason
    assert "reads and writes alike below its peers (seq read 0.47x, seq write 0.40x" in v.reason
    assert v.reason.endswith("a slower device, not a slow reader; not drained"), v.reason
    assert v.baseline and not is_suspect(v) and not counts_as_slow(v)
    w = got["fleet08"]  # read 0.58x (a close call at most), write 0.39x: SLOW_WRITE before
    assert w.status == Status.DEGRADED and w.signals == ("slower_device",), w.reason
    assert slow_ones(screen(probes)) == []
    assert suspects(evaluate(probes, {}, POLICY)) == []  # no re-probe either


def test_a_slower_device_at_its_usual_place_reads_as_usual() -> None:
    probes = _device()
    history = {p.node: [(p.seq_read.bw_bytes if p.seq_read else 0.0)] * 3 for p in probes}
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.status == Status.OK and v.signals == () and v.baseline, v.reason
    assert "a slower device, not a slow reader" in v.reason


@pytest.mark.parametrize(
    ("read", "write", "why"),
    [
        (330, 1000, "a 3x reader beside a normal write"),
        (330, 600, "its read 0.33x, more than 1/0.71 below its write 0.60x"),
        (200, 200, "both ways at 0.20x: under a quarter of the peers"),
        (470, 900, "its write at the peers' (0.89x >= 0.71)"),
    ],
)
def test_what_is_no_slower_device_is_still_slow(read: float, write: float, why: str) -> None:
    reads, writes = list(DEVICE_READS), list(DEVICE_WRITES)
    reads[4], writes[4] = read, write
    v = verdicts(evaluate(_device(reads, writes), {}, POLICY))["fleet05"]
    assert v.status == Status.SLOW_READ and "slower_device" not in v.signals, (why, v.reason)


def test_a_slow_writer_with_normal_reads_is_still_slow_write() -> None:
    reads, writes = list(DEVICE_READS), list(DEVICE_WRITES)
    reads[4], writes[4] = 1000, 300
    v = verdicts(evaluate(_device(reads, writes), {}, POLICY))["fleet05"]
    assert v.status == Status.SLOW_WRITE and v.signals == ("peer_write",), v.reason


def test_a_device_creeping_down_both_ways_is_not_a_slower_device() -> None:
    """Its baselines fall step by step (usual.falling): a drive on its way down, judged as
    any node, even though it reads and writes alike below the round."""
    probes = _device()
    history = {p.node: [(p.seq_read.bw_bytes if p.seq_read else 0.0)] * 3 for p in probes}
    history["fleet05"] = [470 / 0.9**k * MB for k in range(1, 6)]  # newest first
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    assert v.status == Status.SLOW_READ and "slower_device" not in v.signals, v.reason


def _masked(pair_write: float) -> tuple[list[NodeProbe], dict[str, list[float]]]:
    """A read slowdown shared by the fleet (every node reads 184 MB/s) and the slower pair
    (fleet05, fleet07) writing ``pair_write`` MB/s among writers at ~1,250; its history
    (full probes before the slowdown) puts its reads at 0.6x its peers'."""
    writes = [1250, 1230, 1270, 1240, pair_write, 1260, pair_write, 1255]
    probes = _device([184] * 8, writes)
    history = {p.node: [1000 * MB] * 3 for p in probes}
    history["fleet05"] = history["fleet07"] = [600 * MB] * 3
    return probes, history


def test_a_slower_device_whose_reads_a_shared_slowdown_masks_is_not_a_slow_writer() -> None:
    """The prolog matrix's read-slowdown cases (2026-12-03 16:37): `SLOW_WRITE confirmed:
    seq write 567 MB/s = 0.47x round-2 peer median 1,206 MB/s [...; round 1: seq read 184
    MB/s = 1.00x ...]`: only its write still showed the slower model."""
    probes, history = _masked(560)
    v = verdicts(evaluate(probes, history, POLICY))["fleet05"]
    # at its usual place (the round reads below its history, the node less than the rest)
    assert v.status == Status.OK and v.baseline and v.signals == (), v.reason
    assert v.reason.startswith("seq write 560 MB/s = 0.45x peer median"), v.reason
    assert "but its history puts its seq read at 0.60x its peers (this round 1.00x) and it " in (
        v.reason
    )
    assert v.reason.endswith("a slower device, not a slow writer; not drained"), v.reason
    assert slow_ones(screen(probes, history=history)) == []


@pytest.mark.parametrize(
    ("write", "known", "why"),
    [
        (350, True, "0.28x: more than 2x below its history's read place 0.60x"),
        (250, False, "0.20x, no history: below a quarter of its peers, a fault either way"),
    ],
)
def test_a_write_below_its_known_place_is_still_slow_write(
    write: float, known: bool, why: str
) -> None:
    probes, history = _masked(write)
    v = verdicts(evaluate(probes, history if known else {}, POLICY))["fleet05"]
    assert v.status == Status.SLOW_WRITE and v.signals == ("peer_write",), (why, v.reason)


def test_a_write_a_shared_read_slowdown_leaves_alone_is_degraded_never_drained() -> None:
    """No history: the read that would tell a slower model (slower both ways) from a slow
    writer is masked by the fleet's read slowdown (usual.masked_writer). The prolog matrix
    on the mixed fleet, 7-of-8 read slowdown, no history (2026-12-03 16:37): `SLOW_WRITE
    confirmed: seq write 566 MB/s = 0.44x round-2 peer median 1,280 MB/s` in 3 of 3."""
    probes, _ = _masked(560)
    first = evaluate(probes, {}, POLICY)
    assert first.shared_cause, first.shared_cause_reason
    v = verdicts(first)["fleet05"]
    assert v.status == Status.DEGRADED and v.signals == ("slower_device",), v.reason
    assert v.baseline and not is_suspect(v), v
    assert v.reason.startswith("seq write 560 MB/s = 0.45x peer median"), v.reason
    assert "(outlier within a shared cause)" not in v.reason, v.reason
    assert v.reason.endswith(
        "but the round's reads are slow together (a shared cause), which hides whether it "
        "reads alike: a slower device or a slow writer (seq write 0.45x the peer median, < "
        "0.71 and >= 0.25); not drained"
    ), v.reason
    assert slow_ones(screen(probes)) == []


def test_a_slow_writer_beside_reads_that_are_not_slow_together_is_still_slow_write() -> None:
    """The same write (0.45x) in a round that reads as usual: no shared cause hides its
    read, which is normal, so it is a slow writer (usual.masked_writer does not apply)."""
    writes = [1250, 1230, 1270, 1240, 560, 1260, 1245, 1255]
    v = verdicts(evaluate(_device([1000] * 8, writes), {}, POLICY))["fleet05"]
    assert v.status == Status.SLOW_WRITE and v.signals == ("peer_write",), v.reason
