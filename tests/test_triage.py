"""The prolog's triage decisions (issue 22): who gets the short probe, who the full one."""

from __future__ import annotations

from dataclasses import replace

from screener.policy import Policy, PrologPolicy
from screener.probe.fio import policy_jobs, probe_duration_s, recipe_fingerprint
from screener.probe.sentinel import SentinelResult
from screener.probe_data import RunSummary, Status, Verdict
from screener.prolog.plan import steadiest
from screener.prolog.triage import (
    ambiguity,
    ambiguous,
    as_usual,
    escalation,
    fresh_references,
    full_probe_fits,
    plan,
    triage_policy,
)
from screener.verdict.judge import evaluate
from tests.test_verdict import POLICY, fleet

ON = Policy()  # triage on by default since 2026-11-26
OFF = replace(Policy(), prolog=PrologPolicy(triage=False))
NODES = [f"node{i:02d}" for i in range(1, 9)]


def test_triage_policy_is_short_and_its_own_recipe() -> None:
    short = triage_policy(ON)
    assert short.probe.ramp_s == 0.25 and short.probe.runtime_s == 0.5
    assert short.probe.seq_bs == ON.probe.seq_bs  # the full probe's blocks unless set
    quarter = replace(ON, prolog=replace(ON.prolog, triage_seq_bs="256k"))
    assert triage_policy(quarter).probe.seq_bs == "256k"
    assert recipe_fingerprint(triage_policy(quarter).probe) != recipe_fingerprint(short.probe)
    jobs = policy_jobs(short.probe)
    assert jobs == ("seq_read", "rand_read")  # reads only: the write is the full probe's
    assert probe_duration_s(short.probe, jobs) == 1.5  # 2 fio jobs x 0.75 s, not 3 x 4 s
    assert short.probe.rand_ramp_s == ON.probe.rand_ramp_s == -1  # = the ramp: one recipe
    cold = triage_policy(replace(ON, prolog=replace(ON.prolog, triage_rand_ramp_s=0.0)))
    assert probe_duration_s(cold.probe, jobs) == 1.25  # the random read unwarmed
    assert recipe_fingerprint(cold.probe) != recipe_fingerprint(short.probe)  # own history
    assert recipe_fingerprint(short.probe) != recipe_fingerprint(ON.probe)  # own history
    # nothing else changes, but a short read's relative finding at a node's usual place is
    # the full probe's to decide (verdict.judge.usual_doubt)
    assert short.verdict.short_read and not ON.verdict.short_read
    assert replace(short, probe=ON.probe, verdict=ON.verdict) == ON
    seq_only = triage_policy(replace(ON, prolog=replace(ON.prolog, triage_rand_read=False)))
    assert policy_jobs(seq_only.probe) == ("seq_read",)
    assert policy_jobs(ON.probe) == ("seq_write", "seq_read", "rand_read")  # full probe kept
    writing = triage_policy(replace(ON, prolog=replace(ON.prolog, triage_write=True)))
    assert policy_jobs(writing.probe) == ("seq_write", "seq_read", "rand_read")
    assert recipe_fingerprint(writing.probe) != recipe_fingerprint(short.probe)
    # The switch adds to the fingerprint only when off: stored write+read histories still match.
    assert recipe_fingerprint(ON.probe) == "6db6da219c5065e4"


def test_plan_triages_a_large_allocation_with_a_clean_record() -> None:
    latest = {"node01": "OK", "node02": "UNKNOWN"}  # node03.. never judged
    assert plan(NODES, 8, latest, set(), ON) == (NODES, [], "")
    # the requeued attempt's lone replacement of an 8-node job: fleet figures are its peers
    assert plan(["node09"], 8, {}, set(), ON) == (["node09"], [], "")


def test_plan_holds_the_doubtful_back_for_the_full_probe() -> None:
    for status in ("DEGRADED", "SLOW_READ", "SLOW_WRITE"):
        tri, held, why = plan(NODES, 8, {"node04": status}, set(), ON)
        assert held == ["node04"] and tri == [n for n in NODES if n != "node04"]
        assert why == "node04: not OK lately"
    tri, held, why = plan(NODES, 8, {}, {"node02", "node05"}, ON)  # slow episodes
    assert held == ["node02", "node05"] and len(tri) == 6
    # too few left to triage beside each other: one full screen of them all
    few = ["node01", "node02", "node03", "node04"]
    assert plan(few, 8, {"node01": "DEGRADED"}, set(), ON) == ([], few, "node01: not OK lately")


def test_plan_gives_a_node_never_fully_probed_the_full_probe_first() -> None:
    """A new store: nodes are each other's only peers, and a read-only triage would pass an
    allocation-wide slowdown that the full probe's write/read ratio shows (issue 22)."""
    assert plan(NODES, 8, {}, set(), ON, unseen=set(NODES)) == (
        [],
        NODES,
        "node01, node02, node03 ...: never fully probed",
    )
    seen = {n: "OK" for n in NODES[:6]}
    tri, held, why = plan(NODES, 8, {**seen, "node01": "SLOW_READ"}, set(), ON, None, {"node08"})
    assert tri == [*NODES[1:6], "node07"] and held == ["node01", "node08"]
    assert why == "node01: not OK lately; node08: never fully probed"
    # the budget still comes first: no room for a full probe after the triage, all triaged
    assert plan(NODES, 8, seen, set(), ON, 1.0, {"node07", "node08"})[:2] == (NODES, [])
    # triage off: unchanged (every node gets the full probe anyway)
    assert plan(NODES, 8, {}, set(), OFF, unseen=set(NODES)) == ([], NODES, "triage off")


def test_plan_sends_small_allocations_to_the_full_probe() -> None:
    assert plan(NODES, 8, {}, set(), OFF) == ([], NODES, "triage off")
    assert plan(NODES[:3], 3, {}, set(), ON) == ([], NODES[:3], "3 nodes < verdict.min_peers 4")


def test_a_close_call_is_ambiguous_and_escalated_beside_references() -> None:
    summary = evaluate(fleet(read=2000), {}, POLICY)  # node01 at 0.6x: a close call
    assert ambiguous(summary, ON) == ["node01"]
    doubt, refs = escalation(summary, ON)
    assert doubt == ["node01"] and len(refs) == 4 and "node01" not in refs  # min_peers
    # references are the healthy nodes closest to the peer median
    z = {v.node: abs(v.z_read or 0.0) for v in summary.verdicts}
    assert max(z[n] for n in refs) <= min(z[n] for n in NODES[1:] if n not in refs)


def test_clear_verdicts_are_not_escalated() -> None:
    healthy = evaluate(fleet(), {}, POLICY)
    slow = evaluate(fleet(read=150), {}, POLICY)  # 1/20: SLOW_READ, decided
    assert {v.status for v in slow.verdicts} == {Status.OK, Status.SLOW_READ}
    assert escalation(healthy, ON) == ([], []) and escalation(slow, ON) == ([], [])


def test_facts_errors_and_a_lone_stall_mode_are_not_ambiguous() -> None:
    """One stall in a 0.5 s window is one event: DEGRADED, but no full probe for it."""
    facts = Verdict("node01", Status.DEGRADED, "pcie link x2 < x4", signals=("facts",))
    down = Verdict("node02", Status.UNKNOWN, "node02: connect refused")
    stall = Verdict("node03", Status.DEGRADED, "stall mode", signals=("stalls",))
    ok = [Verdict(f"node{i:02d}", Status.OK, "fine", baseline=True) for i in range(4, 9)]
    close = Verdict("node09", Status.DEGRADED, "close call", signals=("close_call", "stalls"))
    summary = RunSummary(verdicts=(facts, down, stall, *ok))
    assert ambiguous(summary, ON) == [] and escalation(summary, ON) == ([], [])
    assert ambiguous(RunSummary(verdicts=(facts, down, stall, *ok, close)), ON) == ["node09"]
    # plan's held-back node is escalated; references are the triage's OK nodes
    doubt, refs = escalation(summary, ON, ["node10"])
    assert doubt == ["node10"] and refs == ["node04", "node05", "node06", "node07"]
    assert escalation(evaluate(fleet(), {}, POLICY), ON, ["node09"])[0] == ["node09"]


def test_the_full_probe_runs_only_when_the_budget_holds_both_rounds() -> None:
    # default: 2 rounds x 3 jobs x (1 s + 3 s) = 24 s, x 1.5: within the default 60 s budget
    assert full_probe_fits(ON, 36.0) and not full_probe_fits(ON, 35.9)
    assert full_probe_fits(ON, ON.prolog.budget_s - 20)  # after a slow triage, still
    one = replace(ON, verdict=replace(ON.verdict, confirm=False))
    assert full_probe_fits(one, 18.0) and not full_probe_fits(one, 17.9)


def test_an_ok_node_reading_below_the_borderline_is_ambiguous() -> None:
    """A short probe's spread can hide a gap: OK at 0.6x the peer median gets the full
    probe; OK at 0.72x (the lowest healthy triage figure measured) does not."""
    low = Verdict("node01", Status.OK, "within peers", read_mb_s=600, peer_read_mb_s=1000)
    par = Verdict("node02", Status.OK, "within peers", read_mb_s=720, peer_read_mb_s=1000)
    ok = [Verdict(f"node{i:02d}", Status.OK, "fine", baseline=True) for i in range(3, 9)]
    summary = RunSummary(verdicts=(low, par, *ok))
    assert ambiguous(summary, ON) == ["node01"]
    doubt, refs = escalation(summary, ON)
    assert doubt == ["node01"] and len(refs) == 4 and "node01" not in refs


def test_a_suspect_whose_short_reprobe_passed_is_ambiguous() -> None:
    """A stalling node passes a 0.5 s re-probe now and then: "transient" in a triage is not
    a clean bill of health, the full probe decides; a confirmed SLOW stays decided."""
    summary = evaluate(fleet(), {}, POLICY)  # all OK after round 2
    assert escalation(summary, ON)[0] == []
    doubt, refs = escalation(summary, ON, reprobed=("node03",))
    assert doubt == ["node03"] and "node03" not in refs and len(refs) == 4  # min_peers
    slow = evaluate(fleet(read=150), {}, POLICY)
    assert escalation(slow, ON, reprobed=("node01",)) == ([], [])


def test_the_doubtful_stay_under_a_third_of_the_full_probe() -> None:
    """Two nodes at 0.43x beside three references masked each other (issue 24's pair):
    the references are at least twice the doubtful plus one, never the doubtful."""
    nodes = [Verdict(f"node{i:02d}", Status.OK, "fine", baseline=True) for i in range(1, 11)]
    summary = RunSummary(verdicts=tuple(nodes))
    doubt, refs = escalation(summary, ON, reprobed=("node01", "node02"))
    assert doubt == ["node01", "node02"] and len(refs) == 5 and not set(refs) & set(doubt)
    doubt, refs = escalation(summary, ON, also=("node10",))
    assert doubt == ["node10"] and len(refs) == 4 and "node10" not in refs


def test_held_nodes_are_triaged_when_the_budget_cannot_hold_their_full_probe() -> None:
    """A node not OK lately would wait for the full probe after the triage; when the budget
    left cannot hold both (triage 2 x 1.5 s x 1.5, full 36 s), it gets the triage rather
    than joining the job unprobed."""
    statuses = {"node03": "DEGRADED"}
    tri, held, _ = plan(NODES, 8, statuses, set(), ON, left_s=40.5)
    assert "node03" in held and "node03" not in tri
    tri, held, why = plan(NODES, 8, statuses, set(), ON, left_s=40.45)
    assert tri == NODES and held == [] and "no budget for a full probe" in why
    assert plan(NODES, 8, {}, set(), ON, left_s=1.0) == (NODES, [], "")  # nobody held back


def test_a_triage_of_too_few_nodes_gets_fresh_references() -> None:
    """A node whose sentinel failed, triaged alone, has no peer of the triage's recipe when
    the fleet's recent figures are all the full probe's (a rolling sweep's): it passed at
    0.05x on the floors alone. It now reads beside references: at least min_peers, and the
    probed under a third of the round (escalation's sizing)."""
    fresh = NODES[1:]
    assert fresh_references(["node01"], fresh, 8, ON) == NODES[1:5]
    assert fresh_references(["node01", "node02"], NODES[2:], 8, ON) == NODES[2:7]
    assert fresh_references(NODES[:4], NODES[4:], 8, ON) == []  # enough peers of its own
    assert fresh_references(["node01"], fresh, 8, OFF) == []  # triage off: full probe
    assert fresh_references(["node01"], ["node02", "node03"], 3, ON) == []  # small job
    assert fresh_references(["node01"], ["node02"], 8, ON) == ["node02"]  # what there is
    assert fresh_references([], fresh, 8, ON) == []


def test_references_after_sentinels_are_those_that_read_most_as_usual() -> None:
    mb = 1e6
    results = [
        SentinelResult("node01", False, "0.05x", 15 * mb, 300 * mb),
        SentinelResult("node02", True, "ok", 240 * mb, 300 * mb),
        SentinelResult("node03", True, "ok", 300 * mb, 290 * mb),
        SentinelResult("node04", True, "ok", 330 * mb, 300 * mb),
        SentinelResult("node05", True, "no figure", None, None),
    ]
    assert steadiest(results) == ["node03", "node04", "node02", "node05"]


def test_a_low_read_is_in_doubt_only_when_it_is_unusual_for_that_node() -> None:
    """Issue 44: a healthy node of a slower drive model reads 0.60x of its peers in every
    round; with its history there, it is neither a close call nor ambiguous (the log says
    why), while a node whose history puts it at par and that now reads 0.60x still is."""
    probes = fleet(read=1900, write=2800)  # node01 at 0.60x of the others' median
    history = {f"node{i:02d}": [(3000 + 37 * i) * 1e6] * 3 for i in range(2, 9)}
    slower_model = evaluate(probes, history | {"node01": [1900e6] * 3}, POLICY)
    v = slower_model.verdicts[0]
    assert v.status == Status.OK and v.own_place == 1.0, v.reason
    assert ambiguity(slower_model, ON) == {}
    assert as_usual(slower_model, ON) == [
        "node01: triage read 0.60x peers, its usual 0.60x: not in doubt"
    ]
    dropped = evaluate(probes, history | {"node01": [3000e6] * 3}, POLICY)
    assert dropped.verdicts[0].status == Status.DEGRADED  # a close call, re-probed
    assert ambiguity(dropped, ON) == {"node01": "triage DEGRADED (close_call)"}
    # too few of the round with history: no yardstick for a place, the old rule holds
    lone = evaluate(probes, {"node01": [1900e6] * 3}, POLICY)
    assert lone.verdicts[0].own_place is None and lone.verdicts[0].status == Status.DEGRADED
    # an OK reading low in a noisy round (no close call): in doubt unless usual for it
    noisy = Verdict("node01", Status.OK, "within", read_mb_s=660, peer_read_mb_s=1000)
    rest = [Verdict(f"node{i:02d}", Status.OK, "fine", baseline=True) for i in range(2, 9)]
    fell = replace(noisy, own_place=0.66 / 0.97)  # usually 0.97x of its peers
    assert ambiguity(RunSummary((fell, *rest)), ON) == {
        "node01": "triage read 0.66x peers (its usual 0.97x, < 0.71)"
    }
    assert ambiguity(RunSummary((noisy, *rest)), ON) == {
        "node01": "triage read 0.66x peers (< 0.71)"  # no usual place known
    }
    assert ambiguity(RunSummary((replace(noisy, own_place=0.95), *rest)), ON) == {}
