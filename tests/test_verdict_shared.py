"""Shared cause and confirmation as the Slurm side acts on them (issue 19 items 8 and 10):
an outlier within a fleet-wide slowdown is confirmed and drained, the nodes the shared
cause explains are absolved (and recorded as such), and every median a reason quotes says
which round it is from. Probes are the captured fio output scaled (tests/test_verdict_hold)."""

from __future__ import annotations

import pytest

from screener.hooks.drain_rules import absolved, drain_reason, drainable
from screener.probe_data import RunSummary, Status
from screener.verdict.judge import SLOW, confirm, evaluate, references, suspects
from screener.verdict.rules import borderline_level
from tests.test_verdict_hold import MB, POLICY, node, spread, statuses


def test_outlier_within_a_shared_cause_is_confirmed_and_drainable_the_rest_absolved() -> None:
    probes = spread(8, read=500, write=480)  # 6x below their 3,000 MB/s history
    probes[4] = node("n05", read=60, write=480)  # 50x below it
    history = {p.node: [3000 * MB] * 5 for p in probes}
    first = evaluate(probes, history, POLICY)
    assert first.shared_cause and suspects(first) == ["n05"]
    refs = references(first, POLICY.confirm_references)
    again = [node("n05", read=55, write=470)] + [node(r, read=510, write=480) for r in refs]
    merged = confirm(first, evaluate(again, history, POLICY), refs)
    got = statuses(merged)
    assert got.pop("n05") == Status.SLOW_READ and set(got.values()) == {Status.UNKNOWN}
    assert merged.shared_cause  # the run keeps its shared cause for the alert
    # the 50x node is drained (what `screen` exits 3 for); the 7 others are absolved
    assert [v.node for v in drainable(merged, confirm=True)] == ["n05"]
    assert [v.node for v in merged.verdicts if v.status in SLOW] == ["n05"]  # `screen` exits 3
    assert absolved(merged) == [f"n{i:02d}" for i in range(1, 9) if i != 5]
    outlier = next(v for v in merged.verdicts if v.node == "n05")
    assert outlier.confirmed and "outlier within a shared cause" in outlier.reason


def test_all_slow_together_absolves_everyone_and_drains_nobody() -> None:
    probes = spread(8, read=500, write=480)
    history = {p.node: [3000 * MB] * 5 for p in probes}
    summary = evaluate(probes, history, POLICY)
    assert summary.shared_cause and drainable(summary, confirm=False) == []
    assert absolved(summary) == [p.node for p in probes]


def test_confirmed_reason_names_the_round_of_each_median() -> None:
    first_probes = spread(8)  # ~3,090 MB/s
    first_probes[0] = node("n01", read=150, write=2800)
    first = evaluate(first_probes, {}, POLICY)
    refs = references(first, POLICY.confirm_references)
    # round 2 with 4 nodes at once reads faster (seen on the real fleet: 3,200 vs 1,800)
    second = [node("n01", read=150, write=2800)] + [node(r, read=7500) for r in refs]
    merged = confirm(first, evaluate(second, {}, POLICY), refs)
    v = merged.verdicts[0]
    assert v.confirmed and v.status == Status.SLOW_READ
    assert "= 0.02x round-2 peer median 7,500 MB/s" in v.reason, v.reason
    assert "round 1: seq read 150 MB/s = 0.05x round-1 peer median 3,0" in v.reason, v.reason
    assert "0.02x peer median" not in v.reason  # no median left unnamed
    # the run's median (shown beside the reasons) stays round 1's
    assert merged.peer_read_median_mb_s == first.peer_read_median_mb_s
    # the drain reason compares figures of one round: the round-2 read to round 2's median
    assert drain_reason("screener:", v, merged.peer_read_median_mb_s, 9) == (
        "screener: rd 0.02x peers r9"
    )


def test_transient_and_failed_reprobes_name_the_round_one_median() -> None:
    first_probes = spread(8)
    first_probes[0] = node("n01", read=150, write=2800)
    first = evaluate(first_probes, {}, POLICY)
    refs = references(first, POLICY.confirm_references)
    second = [node("n01", read=3000)] + [node(r, read=3000) for r in refs]
    v = confirm(first, evaluate(second, {}, POLICY), refs).verdicts[0]
    assert v.status == Status.OK and "x round-1 peer median" in v.reason, v.reason


def test_ratio_below_one_percent_keeps_its_digits() -> None:
    """The demo's 20 MB/s node against a 5,745 MB/s median read `0.00x` in its reason."""
    from screener.verdict.rules import fmt_ratio

    assert (fmt_ratio(20 / 5745), fmt_ratio(0.43), fmt_ratio(1.0)) == ("0.0035", "0.43", "1.00")


# ---- shared cause across history (issue 24) ---------------------------------------------


def test_seven_of_eight_below_their_history_together_blame_nobody() -> None:
    """Issue 24's case: seven nodes slowed ~4x together (noisy: 0.23-0.30x of their own
    3,000 MB/s), one untouched. Only two fall below the history rule's 0.25x, too few for
    the plain shared-cause count, so before both were blamed (seen: a slowed node confirmed
    SLOW_READ on `0.24x its own median`)."""
    slowed = [700, 760, 800, 900, 720, 850, 780]  # 0.23x .. 0.30x of 3,000
    probes = [node(f"n{i:02d}", read=r, write=480) for i, r in enumerate(slowed, 1)]
    probes.append(node("n08", read=3000, write=2800))
    history = {p.node: [3000 * MB] * 5 for p in probes}
    summary = evaluate(probes, history, POLICY)
    got = statuses(summary)
    assert suspects(summary) == [] and drainable(summary, confirm=False) == []
    assert got.pop("n08") == Status.OK
    below = [n for n, r in zip(got, slowed, strict=True) if r < 0.25 * 3000]
    assert below == ["n01", "n05"]
    assert all(got[n] == Status.UNKNOWN for n in below)  # not blamed, visible
    assert all(got[n] == Status.OK for n in got if n not in below)  # within peers and level
    assert summary.shared_cause and absolved(summary) == below
    assert "2/8 nodes read below 0.25x their own history" in summary.shared_cause_reason


def test_a_lone_node_below_its_history_is_still_blamed() -> None:
    """The fleet reads at its history: the level is 1, the plain rule holds."""
    probes = spread(8)
    probes[2] = node("n03", read=600, write=700)  # 0.2x its own, and 0.2x the peers
    history = {p.node: [3000 * MB] * 5 for p in probes}
    summary = evaluate(probes, history, POLICY)
    v = next(v for v in summary.verdicts if v.node == "n03")
    assert v.status == Status.SLOW_READ and "history" in v.signals
    assert "the round's nodes read" not in v.reason and not summary.shared_cause


def test_the_history_bar_moves_with_the_round_and_says_so() -> None:
    """Everyone at 0.6x their history (a busier hour): a node at 0.12x its own (0.2x the
    level) is blamed, with the level in the reason; one at 0.2x its own (0.33x) is not."""
    probes = spread(8, read=1800)
    probes[0] = node("n01", read=360, write=2800)
    probes[1] = node("n02", read=600, write=2800)
    history = {p.node: [3000 * MB] * 5 for p in probes}
    summary = evaluate(probes, history, POLICY)
    v1, v2 = summary.verdicts[0], summary.verdicts[1]
    assert "history" in v1.signals and "(the round's nodes read 0.6" in v1.reason, v1.reason
    assert "history" not in v2.signals, v2.reason
    assert not summary.shared_cause  # 0.6x is not a fleet-wide slowdown


def test_without_enough_nodes_with_history_the_plain_rule_holds() -> None:
    probes = spread(8)
    probes[0] = node("n01", read=720, write=2800)  # 0.24x its own
    history = {"n01": [3000 * MB] * 5, "n02": [3000 * MB] * 5}  # 2 < min_peers
    summary = evaluate(probes, history, POLICY)
    assert "history" in summary.verdicts[0].signals


def test_a_node_whose_history_its_peers_outgrew_is_not_blamed_at_par() -> None:
    """The prolog matrix (mixed fleet, history, fleet_read_6x; 2026-12-05): after a 6x read
    slowdown of the whole fleet, five nodes had learned the new level under the triage's
    recipe; three, held back from one triage, still compared with the full probe's healthy
    level. At par with the round (1.00x its peer median), 0.16-0.24x their own median, they
    were `SLOW_READ confirmed` on history alone. Their history is out of line, not their
    read. One that also reads below its peers (0.62x) is blamed as before."""
    probes = spread(8, read=240, write=280)
    stale = ("n04", "n05", "n07")
    history = {p.node: [240 * MB] * 3 for p in probes}
    history.update({n: [1533 * MB, 1631 * MB, 230 * MB] for n in stale})
    summary = evaluate(probes, history, POLICY)
    assert statuses(summary) == {p.node: Status.OK for p in probes}, summary
    assert not summary.shared_cause
    probes[3] = node("n04", read=150, write=280)  # 0.62x the round, 0.1x its own
    v = evaluate(probes, history, POLICY).verdicts[3]
    assert v.status == Status.SLOW_READ and "history" in v.signals, v.reason


# ---- both rounds' evidence (issue 24) ------------------------------------------------------


def _reprobed(round2_read: float, level: float | None = None) -> RunSummary:
    """n01 reads 0.3x its peers in round 1, then ``round2_read`` MB/s beside 3,000 MB/s refs."""
    probes = spread(8)
    probes[0] = node("n01", read=900, write=2800)
    first = evaluate(probes, {}, POLICY)
    assert suspects(first) == ["n01"]
    refs = references(first, POLICY.confirm_references)
    second = [node("n01", read=round2_read)] + [node(r, read=3000) for r in refs]
    level = borderline_level(POLICY) if level is None else level
    return confirm(first, evaluate(second, {}, POLICY), refs, level)


def test_a_suspect_still_below_its_peers_in_round_two_is_degraded_never_ok() -> None:
    """0.3x, then 0.6x: no rule fires in round 2 (the peer rule needs < 0.5x), but slower
    than its peers twice is not 'transient'. DEGRADED: not drained, no fast path."""
    merged = _reprobed(1800)
    v = merged.verdicts[0]
    assert round(borderline_level(POLICY), 2) == 0.71
    assert v.status == Status.DEGRADED and "borderline" in v.signals, v.reason
    assert v.reason.startswith("borderline: slower than its peers in both rounds: round 2 ")
    assert "0.60x the round-2 peer median (< 0.71)" in v.reason, v.reason
    assert "round 1: seq read 900 MB/s" in v.reason and not v.baseline
    assert drainable(merged, confirm=True) == []
    # no history: the reason says the node's usual place is not known yet (issue 44)
    assert v.reason.endswith("a slower drive model learns it in 3 screens"), v.reason


def test_a_borderline_node_below_its_known_place_does_not_say_unknown() -> None:
    """With 3 baselines each (n01 usually reads like the rest), round 2's 0.6x is 0.6 of its
    usual place: borderline, and the reason does not claim its place is unknown."""
    probes = spread(8)
    probes[0] = node("n01", read=900, write=2800)
    first = evaluate(probes, {}, POLICY)
    refs = references(first, POLICY.confirm_references)
    history = {n: [3000 * MB] * 3 for n in ["n01", *refs]}
    second = [node("n01", read=1800)] + [node(r, read=3000) for r in refs]
    merged = confirm(first, evaluate(second, history, POLICY), refs, borderline_level(POLICY))
    v = merged.verdicts[0]
    assert v.status == Status.DEGRADED and v.own_place is not None, v.reason
    assert round(v.own_place, 2) == 0.6 and "not known yet" not in v.reason, v.reason


def test_a_suspect_at_par_in_round_two_was_transient() -> None:
    merged = _reprobed(2700)
    v = merged.verdicts[0]
    assert v.status == Status.OK and v.reason.startswith("transient: "), v.reason


def test_borderline_off_keeps_round_twos_own_call() -> None:
    """Without the both-rounds weighing, 0.6x in round 2 is round 2's close call, not OK."""
    v = _reprobed(1800, level=0.0).verdicts[0]
    assert v.status == Status.DEGRADED and v.signals == ("close_call",)
    assert v.reason.startswith("close call: seq read 1,800 MB/s = 0.60x round-2 peer median")
    assert "; round 1: seq read 900 MB/s" in v.reason


# ---- close calls: more evidence between clearly healthy and clearly slow (issue 24) --------


def _close(round2_read: float) -> RunSummary:
    """n01 reads 0.62x its (quiet) peers in round 1: past their noise, not past the gap."""
    probes = spread(8)
    probes[0] = node("n01", read=1900)
    first = evaluate(probes, {}, POLICY)
    assert first.verdicts[0].status == Status.DEGRADED
    assert first.verdicts[0].signals == ("close_call",)
    assert suspects(first) == ["n01"]  # probed again, beside the references
    refs = references(first, POLICY.confirm_references)
    second = [node("n01", read=round2_read)] + [node(r, read=3000) for r in refs]
    return confirm(first, evaluate(second, {}, POLICY), refs, borderline_level(POLICY))


def test_a_close_call_at_par_in_round_two_is_ok() -> None:
    v = _close(2900).verdicts[0]
    assert v.status == Status.OK and v.reason.startswith("transient: first probe close call")


def test_a_close_call_twice_is_degraded_never_ok_nor_drained() -> None:
    merged = _close(1900)
    v = merged.verdicts[0]
    assert v.status == Status.DEGRADED and "borderline" in v.signals, v.reason
    assert "round 1: close call: seq read 1,900 MB/s" in v.reason, v.reason
    assert drainable(merged, confirm=True) == []
    # in the band both rounds: where it reads, so its history (issue 44: a slower drive model
    # on a paced fleet was borderline on every screen and paid a full probe in every job);
    # after a slow finding in round 1 (above: 0.3x, then 0.6x) never
    assert v.baseline and not _reprobed(1800).verdicts[0].baseline
    # three such screens later it reads at its usual place: no close call, OK
    probes = spread(8)
    probes[0] = node("n01", read=1900)
    history = {p.node: [p.seq_read.bw_bytes] * 3 for p in spread(8) if p.seq_read}
    learned = evaluate(probes, history | {"n01": [1900 * 1e6] * 3}, POLICY).verdicts[0]
    assert learned.status == Status.OK and learned.own_place is not None, learned.reason


def test_a_close_call_then_below_the_gap_in_round_two_is_slow_once_not_twice() -> None:
    """Issue 44: a slower model, a close call among eight, read 0.34-0.48x beside a few
    references that sped up with fewer nodes on the host, and was drained."""
    merged = _close(1300)  # 0.43x round 2's references
    v = merged.verdicts[0]
    assert v.status == Status.DEGRADED and not v.confirmed, v.reason
    assert v.signals == ("peer_read", "borderline"), v.reason
    assert v.reason.startswith(
        "borderline: a close call in round 1, below the gap only in round 2: seq read 1,300"
        " MB/s = 0.43x round-2 peer median 3,000 MB/s"
    ), v.reason
    assert v.reason.endswith(
        "round 1: seq read 1,900 MB/s = 0.61x round-1 peer median 3,090 MB/s]: slow once, not twice"
    ), v.reason
    assert drainable(merged, confirm=True) == [] and not v.baseline


@pytest.mark.parametrize("read", [700, 300])  # 0.23x, 0.10x: two gaps below, or more
def test_a_close_call_then_far_below_in_round_two_is_confirmed(read: float) -> None:
    v = _close(read).verdicts[0]
    assert v.status == Status.SLOW_READ and v.confirmed, v.reason


def test_a_close_call_then_below_the_gap_without_the_weighing_is_confirmed() -> None:
    """``borderline`` 0 (the both-rounds weighing off): round 2's own finding decides."""
    probes = spread(8)
    probes[0] = node("n01", read=1900)
    first = evaluate(probes, {}, POLICY)
    refs = references(first, POLICY.confirm_references)
    second = [node("n01", read=1300)] + [node(r, read=3000) for r in refs]
    v = confirm(first, evaluate(second, {}, POLICY), refs, 0.0).verdicts[0]
    assert v.status == Status.SLOW_READ and v.confirmed, v.reason


def test_a_close_call_is_no_call_in_a_noisy_fleet() -> None:
    """The decision knows its noise: peers spread 0.6x-1.6x, so 0.62x is within it."""
    probes = [
        node(f"n{i:02d}", read=r)
        for i, r in enumerate((1900, 1800, 3000, 4800, 2500, 3600, 2000, 4000), 1)
    ]
    v = evaluate(probes, {}, POLICY).verdicts[0]
    assert v.status == Status.OK and v.signals == (), v.reason


def test_close_calls_are_not_a_shared_cause() -> None:
    """Three slow writers and two close calls are 5 of 8 suspects but 3 slow findings: no
    shared cause (it would absolve the close calls and flag the run)."""
    probes = spread(8)
    for i in (5, 6, 7):
        probes[i] = node(f"n0{i + 1}", write=300)
    for i in (0, 1):
        probes[i] = node(f"n0{i + 1}", read=1900)
    summary = evaluate(probes, {}, POLICY)
    assert not summary.shared_cause, summary.shared_cause_reason
    got = statuses(summary)
    assert [got[f"n0{i}"] for i in (1, 2, 6, 7, 8)] == [Status.DEGRADED] * 2 + [
        Status.SLOW_WRITE
    ] * 3


# ---- below the gap twice, its z short in round 2 (issue 44) ----------------------------

REFS_SPREAD = (1400, 2200, 2200, 2600, 3500)  # round 2's 5 references, unpaced: wide


def _two_suspects(round2_read: float) -> RunSummary:
    """n01 (0.29x) and n02 (0.23x) suspects in round 1; in round 2 n01 reads
    ``round2_read`` MB/s beside n02 at 650 and 5 references spread 1,400-3,500 MB/s, as
    unpaced references beside two throttled readers read on the mixed fleet."""
    probes = spread(8)
    probes[0] = node("n01", read=900, write=2800)
    probes[1] = node("n02", read=700, write=2800)
    first = evaluate(probes, {}, POLICY)
    assert suspects(first) == ["n01", "n02"]
    refs = references(first, POLICY.confirm_references)
    assert len(refs) == len(REFS_SPREAD)
    second = [node("n01", read=round2_read), node("n02", read=650)]
    second += [node(r, read=x) for r, x in zip(refs, REFS_SPREAD, strict=True)]
    return confirm(first, evaluate(second, {}, POLICY), refs, borderline_level(POLICY))


def test_below_the_gap_in_both_rounds_is_confirmed_though_round_2s_z_is_short() -> None:
    """The prolog matrix, mixed fleet (2026-12-03 19:50): a 3x reader read 0.41x in round 1
    and 0.32x in round 2, where its z missed the cut: `DEGRADED borderline`, not drained."""
    merged = _two_suspects(950)
    v = merged.verdicts[0]
    assert v.status == Status.SLOW_READ and v.confirmed and "peer_read" in v.signals, v.reason
    assert v.reason.startswith(
        "confirmed: below the gap in both rounds: round 2 seq read 0.43x the round-2 peer "
        "median (< 0.5; z=-1.3 there, short of the peer rule's cut), round 1: seq read 900 MB/s"
    ), v.reason
    assert "n01" in [d.node for d in drainable(merged, confirm=True)]


def test_below_the_gap_only_in_round_1_stays_borderline() -> None:
    v = _two_suspects(1300).verdicts[0]  # 0.59x in round 2: slower twice, not below twice
    assert v.status == Status.DEGRADED and "borderline" in v.signals, v.reason
    assert v.reason.startswith("borderline: slower than its peers in both rounds"), v.reason
