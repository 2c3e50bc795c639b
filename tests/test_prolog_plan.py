"""The prolog's plan (screener/prolog/plan.py) in process: every branch of its decisions over
plain data, then a property test over generated jobs. No store, no SSH, no Slurm: the
emulated-cluster files (test_prolog.py, test_sentinel_cluster.py, ...) run the executor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from screener.hostlist import fold_nodes
from screener.policy import Policy, PrologPolicy
from screener.probe.sentinel import SentinelResult
from screener.probe.short import triage_policy
from screener.probe_data import RunSummary, Status, Verdict
from screener.prolog import plan
from screener.prolog.plan import (
    EXIT_REQUEUE,
    Deadline,
    Doubt,
    Known,
    Screen,
    after_beside,
    after_screen,
    after_sentinels,
    escalation,
    exit_code,
    first_screen,
    opening,
    second_look,
    usual_lines,
)
from screener.prolog.triage import full_probe_fits, triage_cost
from screener.verdict.confirm import unspared

ON = Policy()  # triage and sentinel on by default
OFF = replace(ON, prolog=replace(ON.prolog, triage=False))
NO_SENTINEL = replace(ON, prolog=replace(ON.prolog, sentinel=False))
NODES = tuple(f"node{i:02d}" for i in range(1, 9))
NOW = datetime(2026, 11, 28, 1, 0, tzinfo=UTC)
MB = 1e6
ROOM = 60.0  # budget left: holds the triage and then the full probe (4.5 + 36 s)


def known(
    fresh: Sequence[str] = (),
    statuses: dict[str, str] | None = None,
    flaky: Sequence[str] = (),
    stale: Sequence[str] = (),
) -> Known:
    """A store that saw ``fresh`` pass within the hour (the last named most recently) and
    ``stale`` two hours ago; every node of NODES seen OK by the full probe unless
    ``statuses`` says otherwise."""
    every = {n: ("OK", NOW - timedelta(minutes=50 - i)) for i, n in enumerate(fresh)}
    every |= {n: ("OK", NOW - timedelta(hours=2)) for n in stale}
    latest = {n: ("OK", NOW) for n in NODES} | {n: (s, NOW) for n, s in (statuses or {}).items()}
    return Known.from_store(every, latest, set(flaky), NOW)


def ok(node: str, z: float = 0.0) -> Verdict:
    return Verdict(node, Status.OK, "ok", 300.0, z_read=z, baseline=True, peer_read_mb_s=300.0)


def degraded(node: str) -> Verdict:
    """A close call on the peer rule: ambiguous after a triage."""
    signals = ("peer_read",)
    return Verdict(node, Status.DEGRADED, "close", 200.0, signals=signals, peer_read_mb_s=300.0)


def sentinel(node: str, passed: bool, read: float = 300.0, usual: float = 300.0) -> SentinelResult:
    reason = f"sentinel read {read:.0f} MB/s = {read / usual:.2f}x its usual"
    return SentinelResult(node, passed, reason, read * MB, usual * MB)


# ---- the budget ---------------------------------------------------------------------------


def test_the_deadline_is_the_budget_less_the_time_spent_and_the_reserve() -> None:
    d = Deadline(100.0, 60.0)
    assert d.reserve_s == plan.DECIDE_RESERVE_S == 2.0
    assert d.left(100.0) == 58.0
    assert d.left(130.5) == 27.5
    assert d.left(170.0) == -12.0  # overdrawn: the screen still gets 0.1 s (execute)
    assert Deadline(0.0, 10.0, reserve_s=0.0).left(4.0) == 6.0


def test_known_counts_only_ok_as_a_pass() -> None:
    every = {"node01": ("OK", NOW), "node02": ("DEGRADED", NOW)}
    latest = {"node02": ("SLOW_READ", NOW)}
    k = Known.from_store(every, latest, {"node03"}, NOW)
    assert dict(k.last_pass) == {"node01": NOW}
    assert dict(k.statuses) == {"node02": "SLOW_READ"}
    assert k.flaky == {"node03"} and k.stored
    empty = Known.nothing(NOW)
    assert not empty.stored and not empty.last_pass and not empty.statuses and not empty.flaky


# ---- the opening --------------------------------------------------------------------------


def test_without_a_database_every_node_is_probed() -> None:
    o = opening(NODES, Known.nothing(NOW), ON)
    assert o == plan.Opening(None, (), False, NODES, ())


def test_every_node_fresh_reads_its_sentinel_first() -> None:
    o = opening(NODES, known(NODES), ON)
    assert o.sentinels == NODES and not o.beside and o.probe == () and o.fast is None


def test_every_node_fresh_without_the_sentinel_takes_the_fast_path_at_once() -> None:
    o = opening(NODES, known(NODES), NO_SENTINEL)
    assert o.fast is not None and o.sentinels == () and o.probe == ()
    assert list(o.fast.passed) == list(NODES) and not o.fast.notes
    assert o.fast.line == "fast path: node[01-08] passed within 3600s, not probed"


def test_a_few_unfresh_nodes_are_triaged_beside_the_freshest_the_rest_read_beside() -> None:
    o = opening(NODES, known(NODES[1:], stale=["node01"]), ON)
    # node08 passed most recently: the freshest first, at least min_peers (4) references
    assert o.probe == ("node01", "node08", "node07", "node06", "node05")
    assert o.sentinels == ("node04", "node03", "node02") and o.beside
    assert o.lines == (
        "node[05-08]: fresh, triaged beside node01 as references"
        " (a triage is judged by 4 peers of its own recipe)",
    )


def test_with_triage_off_no_fresh_node_joins_as_a_reference() -> None:
    o = opening(NODES, known(NODES[1:]), OFF)
    assert o.probe == ("node01",) and o.lines == ()
    assert set(o.sentinels) == set(NODES[1:]) and o.beside


def test_a_flaky_fresh_node_is_probed() -> None:
    o = opening(NODES, known(NODES, flaky=NODES[:4]), ON)
    assert o.probe == NODES[:4]  # four to triage: enough peers, no references
    assert o.beside and set(o.sentinels) == set(NODES[4:])


def test_when_every_fresh_node_is_a_reference_no_sentinel_reads() -> None:
    o = opening(NODES[:5], known(NODES[1:5], stale=["node01"]), ON)
    assert o.probe == ("node01", "node05", "node04", "node03", "node02")
    assert o.sentinels == () and o.fast is None and not o.beside


def test_unfresh_nodes_without_the_sentinel_leave_the_rest_on_the_fast_path() -> None:
    o = opening(NODES, known(NODES[2:]), NO_SENTINEL)
    assert o.fast is not None and o.sentinels == ()
    assert set(o.fast.passed) | set(o.probe) == set(NODES)
    assert not set(o.fast.passed) & set(o.probe)


# ---- after the sentinels (every node fresh) -----------------------------------------------


def test_sentinels_that_all_pass_keep_the_job_on_the_fast_path_with_their_readings() -> None:
    results = [sentinel(n, True) for n in NODES]
    c = after_sentinels(results, known(NODES), len(NODES), ON)
    assert c.probe == () and c.said == () and c.lines == () and not c.earlier
    assert c.fast is not None and list(c.fast.passed) == list(NODES)
    assert c.fast.notes == {r.node: r.reason for r in results}
    assert c.fast.line.endswith("passed within 3600s, sentinel as usual (fio 8), not probed")


def test_a_failed_sentinel_is_probed_beside_the_steadiest() -> None:
    results = [sentinel(n, True, read=300.0 - 10 * i) for i, n in enumerate(NODES)]
    results[0] = sentinel("node01", False, read=15.0)
    c = after_sentinels(results, known(NODES), len(NODES), ON)
    assert c.said == (f"node01: {results[0].reason}: full probe",)
    assert c.probe == ("node01", "node02", "node03", "node04", "node05")  # closest to usual
    assert c.earlier == {"node01": 0.05}
    assert c.fast is not None and list(c.fast.passed) == ["node06", "node07", "node08"]
    assert set(c.fast.notes) == set(NODES)  # every reading is a note, as before
    assert c.lines[0].startswith("node[02-05]: fresh, triaged beside node01 as references")


def test_a_failed_sentinel_with_triage_off_is_probed_alone() -> None:
    results = [sentinel(n, n != "node03") for n in NODES]
    results[2] = SentinelResult("node03", False, "no kept file")  # no figure: no ratio
    c = after_sentinels(results, known(NODES), len(NODES), OFF)
    assert c.probe == ("node03",) and c.lines == () and c.earlier == {}
    assert c.fast is not None and "node03" not in c.fast.passed


def test_the_fast_path_counts_its_readers() -> None:
    results = [sentinel(n, True) for n in NODES]
    results[:6] = [
        SentinelResult(r.node, True, f"dd {r.reason}", r.read_bw, r.usual_bw) for r in results[:6]
    ]
    c = after_sentinels(results, known(NODES), len(NODES), ON)
    assert c.fast is not None and "sentinel as usual (dd 6, fio 2), not probed" in c.fast.line


def test_sentinels_beside_the_screen_say_so_on_the_fast_path() -> None:
    results = [sentinel("node01", True), sentinel("node02", False, read=30.0)]
    c = after_beside(results, known(NODES), ON)
    assert c.said == (f"node02: {results[1].reason}: full probe",)
    assert c.fast is not None and list(c.fast.passed) == ["node01"]
    assert c.fast.line == (
        "fast path: node01 passed within 3600s, sentinel as usual (beside the screen; fio 1),"
        " not probed"
    )
    assert after_beside([], known(NODES), ON).fast is None  # the screen failed: none ran


# ---- the first screen ---------------------------------------------------------------------


def test_triage_off_is_the_full_probe_and_says_so() -> None:
    s = first_screen(NODES, known(), len(NODES), OFF, ROOM)
    assert (s.nodes, s.policy, s.stage, s.held, s.run_info) == (NODES, OFF, "", (), None)
    assert s.lines == ()  # triage off is no news
    small = first_screen(NODES[:3], known(), 3, ON, ROOM)
    assert small.stage == "" and small.lines == (
        "triage skipped (3 nodes < verdict.min_peers 4): full probe",
    )


def test_a_triage_holds_back_nodes_never_fully_probed_and_not_ok_lately() -> None:
    k = known(statuses={"node02": "SLOW_READ"})
    unseen = replace(k, statuses={n: s for n, s in k.statuses.items() if n != "node01"})
    s = first_screen(NODES, unseen, len(NODES), ON, ROOM)
    assert s.stage == "triage" and s.nodes == NODES[2:] and s.held == ("node01", "node02")
    assert s.policy == triage_policy(ON) and s.history_also == (ON.probe,)
    assert s.run_info == {"prolog_probe": "triage"}
    assert s.lines == (
        "triage of node[03-08]; node02: not OK lately; node01: never fully probed:"
        " full probe after it",
    )


def test_with_no_budget_for_the_full_probe_after_it_the_held_are_triaged_too() -> None:
    k = known(statuses={"node02": "DEGRADED"})
    s = first_screen(NODES, k, len(NODES), ON, 10.0)
    assert s.nodes == NODES and s.held == ()
    assert s.lines == (
        "triage of node[01-08]; node02: not OK lately, no budget for a full probe after the"
        " triage: triaged",
    )


def test_a_triage_of_known_good_nodes_says_nothing_and_without_a_store_none_is_unseen() -> None:
    assert first_screen(NODES, known(), 8, ON, ROOM) == Screen(
        NODES, triage_policy(ON), "triage", (), (ON.probe,), ()
    )
    assert first_screen(NODES, Known.nothing(NOW), 8, ON, ROOM).held == ()


def test_too_few_left_to_triage_gets_the_full_probe_at_once() -> None:
    k = known(statuses={n: "DEGRADED" for n in NODES[:5]})
    s = first_screen(NODES, k, len(NODES), ON, ROOM)
    assert s.stage == "" and s.nodes == NODES and s.lines[0].startswith("triage skipped (")


# ---- after a screen -----------------------------------------------------------------------


TRIAGE = Screen(NODES[1:], triage_policy(ON), "triage", ("node01",), (ON.probe,))
FULL = Screen(NODES, ON, "")


def summary(*verdicts: Verdict) -> RunSummary:
    return RunSummary(tuple(verdicts), peer_read_median_mb_s=300.0)


def test_after_a_triage_the_ambiguous_and_the_held_get_the_full_probe_beside_references() -> None:
    s = summary(degraded("node02"), *(ok(n, z=0.1 * i) for i, n in enumerate(NODES[2:])))
    d = after_screen(s, (), TRIAGE, ["node03"], ON)
    assert d is not None
    assert d.nodes == ("node02", "node01", "node03")  # ambiguous, held, failed beside
    assert d.why == (
        "node02: triage DEGRADED (peer_read)",
        "node01: held back from the triage",
        "node03: its sentinel failed beside the screen",
    )
    line = escalation(d, TRIAGE, ON, 36.0).lines[0]
    assert line.endswith(
        "(node02: triage DEGRADED (peer_read); node01: held back from the triage; "
        "node03: its sentinel failed beside the screen)"
    ), line
    low = replace(ok("node02"), read_mb_s=198.0)  # OK, 0.66x the triage's peer median
    d2 = after_screen(summary(low, *(ok(n) for n in NODES[2:])), (), TRIAGE, [], ON)
    assert d2 is not None and d2.why[0] == "node02: triage read 0.66x peers (< 0.71)", d2
    assert set(d.references) == set(NODES[3:])  # the baseline nodes not in doubt
    assert after_screen(s, (), TRIAGE, ["node01"], ON) == after_screen(s, (), TRIAGE, [], ON)


def test_a_triage_that_decided_everything_and_held_nobody_leaves_no_doubt() -> None:
    clean = replace(TRIAGE, held=())
    assert after_screen(summary(*(ok(n) for n in NODES)), (), clean, [], ON) is None
    # a suspect whose re-probe passed is in doubt: a node that stalls now and then
    reprobed = after_screen(summary(*(ok(n) for n in NODES)), ("node04",), clean, [], ON)
    assert reprobed is not None and reprobed.nodes == ("node04",)


def test_after_the_full_probe_only_the_failed_beside_sentinels_are_in_doubt() -> None:
    s = summary(degraded("node02"), *(ok(n) for n in NODES[2:]))
    assert after_screen(s, (), FULL, [], ON) is None  # the full probe decided node02
    d = after_screen(s, (), FULL, ["node01"], ON)
    assert d is not None and d.nodes == ("node01",) and "node02" not in d.references
    escalated = replace(FULL, stage="escalated")
    assert after_screen(s, (), escalated, [], ON) is None  # nothing follows a third screen


def test_a_node_the_triage_passed_low_gets_a_second_short_look_before_any_full_probe() -> None:
    """Issue 44: a healthy node reading 0.66x in one 0.5 s window paid a 16-18 s full probe in
    most jobs on a mixed fleet. It is read again with the triage's recipe first, beside the
    references; only what is still low (and the rest of the doubt) gets the full probe."""
    low = replace(ok("node02"), read_mb_s=198.0)  # OK, 0.66x: no usual place known
    s = summary(low, degraded("node03"), *(ok(n) for n in NODES[3:]))
    d = after_screen(s, (), TRIAGE, [], ON)
    assert d is not None and d.nodes == ("node02", "node03", "node01") and d.look == ("node02",)
    look = second_look(d, TRIAGE, ON, ROOM)
    assert look is not None and look.screen is not None
    assert look.screen.stage == "second_look" and look.screen.policy == triage_policy(ON)
    assert look.screen.nodes == ("node02", *d.references)  # beside the same references
    assert look.screen.held == ("node03", "node01")  # the full probe's: DEGRADED, held
    assert look.screen.run_info == {"prolog_probe": "second_look"}
    assert look.lines == (
        f"second look at node02 with the triage's recipe, beside {fold_nodes(d.references)}"
        " (node02: triage read 0.66x peers (< 0.71))",
    )
    # the look reads node02 as its peers: only the rest of the doubt gets the full probe
    par = summary(*(ok(n) for n in look.screen.nodes))
    rest = after_screen(par, (), look.screen, [], ON)
    assert rest is not None and rest.nodes == ("node03", "node01") and rest.look == ()
    assert rest.references == d.references
    assert rest.why == ("node03: triage DEGRADED (peer_read)", "node01: held back from the triage")
    e = escalation(rest, look.screen, ON, 36.0)
    assert e.lines[0].startswith("full probe of node[01,03] after the second look, beside")
    # still low on the look: it joins the full probe, in the look's words
    still = summary(low, *(ok(n) for n in look.screen.nodes[1:]))
    again = after_screen(still, (), look.screen, [], ON)
    assert again is not None and again.nodes == ("node02", "node03", "node01")
    assert again.why[0] == "node02: second look read 0.66x peers (< 0.71)"
    # nothing else waited: a look that settles its node leaves no doubt
    alone = replace(TRIAGE, held=())
    d1 = after_screen(summary(low, *(ok(n) for n in NODES[2:])), (), alone, [], ON)
    assert d1 is not None and d1.look == d1.nodes == ("node02",)
    look1 = second_look(d1, alone, ON, ROOM)
    assert look1 is not None and look1.screen is not None
    assert (
        after_screen(summary(*(ok(n) for n in look1.screen.nodes)), (), look1.screen, [], ON)
        is None
    )


def test_no_second_look_without_budget_for_it_and_the_full_probe_nor_after_a_full_probe() -> None:
    low = replace(ok("node02"), read_mb_s=198.0)
    d = after_screen(summary(low, *(ok(n) for n in NODES[2:])), (), TRIAGE, [], ON)
    assert d is not None and d.look == ("node02",)
    fits = 36.0 + triage_cost(ON)  # the look and both rounds of the full probe after it
    assert second_look(d, TRIAGE, ON, fits) is not None
    assert second_look(d, TRIAGE, ON, fits - 0.1) is None  # then straight to the full probe
    assert escalation(d, TRIAGE, ON, fits - 0.1).screen is not None
    # a suspect whose short re-probe passed (one tail or stall in 0.5 s: often a loaded
    # host) gets the look too; any finding on it, a stall mode included, is the full probe's
    clean = replace(TRIAGE, held=())
    reprobed = after_screen(summary(*(ok(n) for n in NODES)), ("node04",), clean, [], ON)
    assert reprobed is not None and reprobed.look == ("node04",)
    looked = second_look(reprobed, clean, ON, ROOM)
    assert looked is not None and looked.screen is not None
    stall = Verdict("node04", Status.DEGRADED, "stalls", 300.0, signals=("stalls",))
    seen = summary(stall, *(ok(n) for n in looked.screen.nodes[1:]))
    again = after_screen(seen, (), looked.screen, [], ON)
    assert again is not None and again.why == ("node04: second look DEGRADED (stalls)",)
    twice = after_screen(
        summary(*(ok(n) for n in looked.screen.nodes)), ("node04",), looked.screen, [], ON
    )
    assert twice is not None and twice.why == (
        "node04: slow on the second look, passed its re-probe: transient?",
    )
    assert (
        after_screen(summary(*(ok(n) for n in looked.screen.nodes)), (), looked.screen, [], ON)
        is None
    )
    # a low node reading at its own usual place is not in doubt at all
    usual = replace(low, own_place=0.97)
    held = after_screen(summary(usual, *(ok(n) for n in NODES[2:])), (), TRIAGE, [], ON)
    assert held is not None and held.nodes == ("node01",)  # only the held one remains
    assert usual_lines(summary(usual), TRIAGE, ON) == [
        "node02: triage read 0.66x peers, its usual 0.68x: not in doubt"
    ]
    assert usual_lines(summary(usual), FULL, ON) == []  # the full probe decided it


def _at_place(node: str, own: float, *signals: str) -> Verdict:
    """A triage's short-read finding at (``own``) the node's usual place: the mixed
    fleet's slower model as a fresh reference (bench/time_to_start.py, 2026-12-03:
    `node05: DEGRADED seq read 513 MB/s = 0.22x round-2 peer median 2,296 MB/s ... but it
    reads at its usual place among its peers (1.05x, >= 0.5)`)."""
    tags = signals or ("peer_read", "peer_tail", "usual_place")
    return Verdict(
        node, Status.DEGRADED, "short read", 90.0, signals=tags, peer_read_mb_s=300.0,
        own_place=own,
    )  # fmt: skip


def test_a_fresh_reference_at_its_usual_place_is_not_escalated() -> None:
    """It passed within fresh_s and was triaged only as a yardstick for a new node: a short
    read's finding at its usual place costs it no full probe (18.8 s of a 28-30 s start on
    the mixed fleet); below its place, with another finding, or not fresh, it is escalated."""
    job = known(NODES[1:], stale=["node01"])  # node01 unfresh: the 4 freshest its references
    o = opening(NODES, job, ON)
    first = first_screen(o.probe, job, len(NODES), ON, ROOM)
    assert first.stage == "triage" and first.fresh == ("node08", "node07", "node06", "node05")
    s = summary(ok("node01"), ok("node08"), ok("node07"), ok("node06"), _at_place("node05", 1.05))
    assert after_screen(s, (), first, [], ON) is None
    # ... so the triage does not re-probe it either (pipeline.ScreenRequest.spare)
    spared = plan.spare(first, ON)
    assert spared is not None and spared(s) == ["node05"]
    no_fresh = plan.spare(replace(first, fresh=()), ON)
    assert no_fresh is not None and no_fresh(s) == []  # nothing decided, nothing fresh
    assert plan.spare(replace(first, stage="escalated"), ON) is None
    assert usual_lines(s, first, ON) == [
        "node05: fresh reference, triage read 0.30x peers, its usual place 1.05x (>= 0.71):"
        " a short read's finding on a node that passed within 3600s, not escalated"
    ]
    for v, why in (
        (_at_place("node05", 0.66), "triage DEGRADED (peer_read, peer_tail, usual_place)"),
        (_at_place("node05", 1.05, "peer_read", "usual_place", "abs_read"), "abs_read"),
    ):
        d = after_screen(replace(s, verdicts=(*s.verdicts[:4], v)), (), first, [], ON)
        assert d is not None and d.nodes == ("node05",) and why in d.why[0], d
        assert spared(replace(s, verdicts=(*s.verdicts[:4], v))) == []  # re-probed first
    unfresh = replace(first, fresh=())  # node01, the node the triage is for: escalated
    d = after_screen(s, (), unfresh, [], ON)
    assert d is not None and d.nodes == ("node05",)
    # ... unless its re-probe found it at its usual place again (the merged verdict)
    assert after_screen(s, ("node05",), unfresh, [], ON) is None
    assert usual_lines(s, unfresh, ON, ("node05",)) == [
        "node05: triage re-probe read 0.30x peers, its usual place 1.05x (>= 0.71): a short"
        " read's finding at its usual place in both rounds, not escalated"
    ]
    below = replace(s, verdicts=(*s.verdicts[:4], _at_place("node05", 0.66)))
    d = after_screen(below, ("node05",), unfresh, [], ON)
    assert d is not None and d.nodes == ("node05",)  # below its place in round 2: escalated
    no_store = first_screen(o.probe, Known.nothing(NOW), len(NODES), ON, ROOM)
    assert no_store.fresh == ()
    # every node fresh, node05's sentinel failed: it is triaged as a suspect, not a reference
    c = after_sentinels(
        [sentinel(n, n != "node05", 100.0 if n == "node05" else 300.0) for n in NODES],
        known(NODES), len(NODES), ON,
    )  # fmt: skip
    assert c.failed == ("node05",) and "node05" in c.probe
    tri = first_screen(c.probe, known(NODES), len(NODES), ON, ROOM, c.failed)
    assert tri.stage == "triage" and "node05" not in tri.fresh and tri.fresh
    d = after_screen(s, (), replace(first, fresh=tri.fresh), [], ON)
    assert d is not None and d.nodes == ("node05",)  # escalated as any node


# ---- the escalation and the exit code -----------------------------------------------------


def test_the_full_probe_after_a_screen_when_the_budget_holds_it() -> None:
    d = Doubt(("node01",), ("node02", "node03", "node04"))
    e = escalation(d, TRIAGE, ON, 36.0)
    assert e.screen == Screen(("node01", "node02", "node03", "node04"), ON, "escalated")
    assert e.screen.run_info == {"prolog_probe": "escalated"}
    assert e.lines == ("full probe of node01 after the triage, beside node[02-04]",)
    after_full = escalation(d, FULL, ON, 36.0)
    assert after_full.lines == ("full probe of node01 after the screen, beside node[02-04]",)


def test_no_budget_left_no_screen() -> None:
    d = Doubt(("node01", "node02"), ("node03",))
    e = escalation(d, TRIAGE, ON, 35.9)
    assert e.screen is None
    assert e.lines == ("node[01-02]: no budget left for the full probe after the triage",)
    assert escalation(d, FULL, ON, -3.0).lines[0].endswith("after the screen")


def test_a_drain_by_any_screen_requeues() -> None:
    assert exit_code([]) == 0 and exit_code([0]) == 0 and exit_code([0, 0]) == 0
    assert exit_code([EXIT_REQUEUE]) == exit_code([0, EXIT_REQUEUE]) == EXIT_REQUEUE == 1


# ---- the property test --------------------------------------------------------------------

AGES = (None, 60, 3000, 3599, 3601, 7200)  # seconds since the last pass (None: never)
# The latest full probe's status (None: never fully probed), OK the most likely.
STATUSES = ("OK", "OK", "OK", "OK", "UNKNOWN", None, "DEGRADED", "SLOW_READ", "SLOW_WRITE")
# What a screen may say of a node: (status, seq read MB/s against peers at 300, signals,
# baseline). One integer per node picks one (and its z), so that a case costs few draws.
VERDICTS = (
    (Status.OK, 300.0, (), True),
    (Status.OK, 290.0, (), True),
    (Status.OK, 180.0, (), True),  # OK but under the borderline level: ambiguous
    (Status.OK, None, (), True),
    (Status.DEGRADED, 200.0, ("peer_read",), False),  # a close call: ambiguous
    (Status.DEGRADED, 250.0, ("stalls",), False),  # a stall mode alone: not ambiguous
    (Status.DEGRADED, 280.0, ("facts",), False),
    (Status.SLOW_READ, 15.0, ("peer_read", "floor"), False),
    (Status.SLOW_WRITE, 300.0, ("write_floor",), False),
    (Status.UNKNOWN, None, (), False),
    (Status.UNKNOWN, 60.0, ("shared_cause",), True),  # absolved by a shared cause
)


@st.composite
def jobs(draw: st.DrawFn) -> tuple[tuple[str, ...], Known, Policy, float]:
    """A job of 1-32 nodes, what the store says of each (when there is one: the last pass,
    the latest full-probe status, flaky), the policy (triage, sentinel) and the budget."""
    n = draw(st.integers(1, 32))
    nodes = tuple(f"n{i:02d}" for i in range(n))
    ages, kinds = len(AGES), len(AGES) * len(STATUSES)
    each = draw(st.lists(st.integers(0, kinds * 8 - 1), min_size=n, max_size=n))
    rolled, stored, triage, sentinel = draw(
        st.tuples(*(st.sampled_from([True, True, True, False]) for _ in range(4)))
    )
    rolled = rolled and draw(st.booleans())  # a fleet the rolling sweep keeps fresh
    flaky_some = draw(st.booleans())  # some nodes with a slow episode lately, or none
    left = draw(st.sampled_from([-5.0, 0.0, 4.5, 10.0, 36.0, 40.4, 40.5, 41.0, 58.0, 120.0]))
    policy = replace(ON, prolog=PrologPolicy(triage=triage, sentinel=sentinel))
    if not stored:
        return nodes, Known.nothing(NOW), policy, left
    age = {nd: 60 if rolled else AGES[e % ages] for nd, e in zip(nodes, each, strict=True)}
    passes = {nd: NOW - timedelta(seconds=a) for nd, a in age.items() if a is not None}
    status = {nd: STATUSES[e // ages % len(STATUSES)] for nd, e in zip(nodes, each, strict=True)}
    statuses = {nd: s for nd, s in status.items() if s is not None}
    flaky = frozenset(nd for nd, e in zip(nodes, each, strict=True) if flaky_some and e < kinds)
    return nodes, Known(passes, statuses, flaky, NOW), policy, left


def screen_summary(draw: st.DrawFn, nodes: Sequence[str]) -> RunSummary:
    """A screen's verdicts over ``nodes``, of every kind in VERDICTS."""
    size = len(VERDICTS) * 5
    each = draw(st.lists(st.integers(0, size - 1), min_size=len(nodes), max_size=len(nodes)))
    verdicts = []
    for node, e in zip(nodes, each, strict=True):
        status, read, signals, baseline = VERDICTS[e % len(VERDICTS)]
        z = float(e // len(VERDICTS) - 2)  # -2 .. 2: the references' order
        verdicts.append(
            Verdict(
                node,
                status,
                "generated",
                read,
                z_read=z,
                signals=signals,
                baseline=baseline,
                peer_read_mb_s=300.0,
            )
        )
    return RunSummary(tuple(verdicts), peer_read_median_mb_s=300.0)


def once_each(*groups: Sequence[str]) -> list[str]:
    """Every name of ``groups`` in one list (a name twice appears twice)."""
    return [n for g in groups for n in g]


@settings(max_examples=2000, deadline=None)
@given(job=jobs(), data=st.data())
def test_every_node_is_planned_exactly_once(
    job: tuple[tuple[str, ...], Known, Policy, float], data: st.DataObject
) -> None:
    nodes, k, policy, left = job
    o = opening(nodes, k, policy)
    fast = list(o.fast.passed) if o.fast else []
    # the opening: every allocated node is on the fast path, sentinel-checked or to probe
    assert sorted(once_each(fast, o.sentinels, o.probe)) == sorted(nodes)
    fresh = [n for n in nodes if n in k.last_pass and NOW - k.last_pass[n] <= timedelta(hours=1)]
    assert set(fast) | set(o.sentinels) <= set(fresh) - k.flaky
    if not k.stored:
        assert o.probe == nodes
    if o.sentinels:
        assert policy.prolog.sentinel and k.stored and o.fast is None
        assert o.beside == bool(o.probe)
    refs = [n for n in o.probe if n in fresh and n not in k.flaky]
    assert not refs or policy.prolog.triage  # fresh nodes probed only as a triage's peers

    probe = o.probe
    if o.sentinels and not o.beside:  # every node fresh: the sentinels decide first
        kinds = data.draw(st.lists(st.integers(0, 3), min_size=len(nodes), max_size=len(nodes)))
        reads = (300.0, 240.0, 15.0, 100.0)  # at usual, a little below; failed: far, close
        results = [sentinel(n, k < 2, reads[k]) for n, k in zip(o.sentinels, kinds, strict=True)]
        c = after_sentinels(results, k, len(nodes), policy)
        checked_fast = list(c.fast.passed) if c.fast else []
        assert sorted(once_each(checked_fast, c.probe)) == sorted(nodes)
        failed = [r.node for r in results if not r.passed]
        assert set(failed) <= set(c.probe) and set(checked_fast) <= set(nodes) - set(failed)
        assert len(c.said) == len(failed)
        probe = c.probe
    if not probe:
        return

    first = first_screen(probe, k, len(nodes), policy, left)
    # the first screen probes each node once; the held wait for the full probe after it
    assert sorted(once_each(first.nodes, first.held)) == sorted(probe)
    assert not set(first.held) & set(first.nodes)
    if first.stage == "triage":
        assert policy.prolog.triage and len(nodes) >= policy.verdict.min_peers
        assert first.policy == triage_policy(policy)
        if first.held:  # held back only when the budget holds both screens
            assert full_probe_fits(policy, left - triage_cost(policy))
    else:
        assert first.stage == "" and first.nodes == tuple(probe) and first.policy == policy

    beside = list(o.sentinels) if o.beside else []
    failed_beside = data.draw(st.lists(st.sampled_from(beside), unique=True)) if beside else []
    s = screen_summary(data.draw, first.nodes)
    reprobed = data.draw(st.lists(st.sampled_from(first.nodes), unique=True, max_size=3))
    doubt = after_screen(s, reprobed, first, failed_beside, policy)
    if doubt is None:
        assert not first.held and not failed_beside
        return
    # references are never doubtful nodes, and come from the screen's own nodes
    assert not set(doubt.references) & set(doubt.nodes)
    assert set(doubt.references) <= set(first.nodes)
    assert set(first.held) | set(failed_beside) <= set(doubt.nodes)
    assert len(set(doubt.nodes)) == len(doubt.nodes)

    later = data.draw(st.sampled_from([-1.0, 0.0, 35.9, 36.0, 40.4, 40.5, 50.0]))
    assert set(doubt.look) <= set(doubt.nodes) and not set(doubt.look) & set(first.held)
    look = second_look(doubt, first, policy, later)
    if look is not None:  # a short look at what the triage passed low, the rest waits
        assert first.stage == "triage" and doubt.look and look.screen is not None
        assert full_probe_fits(policy, later - triage_cost(policy))
        assert look.screen.nodes == (*doubt.look, *doubt.references)
        assert set(look.screen.held) == set(doubt.nodes) - set(doubt.look)
        seen = screen_summary(data.draw, look.screen.nodes)
        rest = after_screen(seen, (), look.screen, [], policy)
        assert rest is None or (
            set(rest.nodes) <= set(doubt.nodes) and rest.references == doubt.references
        )
        assert rest is not None or set(doubt.nodes) == set(doubt.look)
    e = escalation(doubt, first, policy, later)
    assert (e.screen is None) == (not full_probe_fits(policy, later))
    if e.screen is not None:
        assert e.screen.nodes == (*doubt.nodes, *doubt.references) and e.screen.policy == policy
        assert len(set(e.screen.nodes)) == len(e.screen.nodes)
        after = after_screen(screen_summary(data.draw, e.screen.nodes), (), e.screen, [], policy)
        assert after is None  # the full probe of a doubt is the last screen


def test_once_round_1_decided_a_node_the_triage_re_probes_no_degraded_one() -> None:
    """The job is requeued after the drain and screened again where it lands: a DEGRADED
    node's re-probe would only delay it (a paced healthy node's 0.5 s tail: 2.5 s of a
    10.1 s start, 2026-12-05). A SLOW suspect is still confirmed (unspared), and the log
    says which nodes were left and why."""
    job = known(NODES, stale=NODES)
    first = first_screen(opening(NODES, job, ON).probe, job, len(NODES), ON, ROOM)
    assert first.stage == "triage" and first.fresh == ()
    decided = Verdict("node01", Status.SLOW_READ, "0.05x [decisive in round 1: ...]",
                      confirmed=True)  # fmt: skip
    tail = Verdict("node07", Status.DEGRADED, "13% of seq reads >= 100 ms", signals=("slow_ios",))
    slow = Verdict("node03", Status.SLOW_READ, "0.3x", signals=("peer_read",))
    s = summary(decided, ok("node02"), slow, tail)
    spared = plan.spare(first, ON)
    assert spared is not None and spared(s) == ["node07"]
    assert unspared(["node03", "node07"], s, spared(s)) == ["node03"]
    assert spared(summary(ok("node01"), slow, tail)) == []  # nothing decided: re-probed
    assert plan.unreprobed_lines(s, ("node03",)) == [
        "node07: not re-probed nor escalated: node01 decided in round 1 and the job is"
        " requeued; they are screened again where it lands"
    ]
    assert plan.unreprobed_lines(s, ("node03", "node07")) == []
    assert plan.unreprobed_lines(s, ("node01", "node03")) == []  # node01 confirmed in round 2
