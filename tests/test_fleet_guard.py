"""Small allocations are judged on the fleet (issue 27): the pure fleet view and guard, the
plan a 1-/2-node job gets, and the store read that feeds them (SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from store_data import at, error_probe, full_probe, verdict

from screener.hooks.drain_rules import plan_drains
from screener.hooks.fleet_guard import FleetFigures, FleetView, fleet_view, judge_small
from screener.policy import SlurmPolicy
from screener.probe_data import RunSummary, Status, Trigger
from screener.store import Store
from screener.store.slurm_records import SlurmRecords

pytest_plugins = ["store_fixtures"]

MB = 1e6
# Healthy emulated nodes read 1,245-2,332 MB/s in one run (issue 24's figures); the slow
# one ~1/25 of its usual level.
USUAL = {f"node0{i}": [1800 * MB, 1650 * MB, 2100 * MB] for i in range(1, 9)}
HEALTHY_NOW = {
    f"node0{i}": bw * MB for i, bw in enumerate([1245, 2332, 1660, 1900, 1500, 2000, 1700, 1400], 1)
}


def view(now: dict[str, float], usual: dict[str, list[float]] = USUAL) -> FleetView:
    """The fleet's reads (writes unknown)."""
    return fleet_view(FleetFigures({"read": now}, {"read": usual}, 900), drop=0.25)


READ = {"node03": "read"}


def test_one_node_at_a_25th_is_slow_against_its_own_level_the_rest_are_not() -> None:
    v = view({**HEALTHY_NOW, "node03": 70 * MB})
    assert v.judged["read"] == frozenset(HEALTHY_NOW) and v.slow["read"] == {"node03"}
    assert v.judged["write"] == frozenset()


def test_a_node_without_history_is_judged_against_the_fleets_usual_level() -> None:
    usual = {n: f for n, f in USUAL.items() if n != "node09"}
    v = view({**HEALTHY_NOW, "node09": 60 * MB, "node10": 1900 * MB}, usual)
    assert "node09" in v.slow["read"] and "node10" in v.judged["read"]
    assert "node10" not in v.slow["read"]
    # nobody has history: no level, no evidence either way
    assert view({"node01": 60 * MB}, {}).judged["read"] == frozenset()


def test_a_lone_slow_node_of_a_one_node_job_is_not_a_shared_cause() -> None:
    hold, line = judge_small(READ, ["node03"], view({**HEALTHY_NOW, "node03": 70 * MB}), 0.34, 3)
    assert not hold
    assert line == (
        "fleet: 1 of 8 partition nodes probed within 900s read slow (node03), 7 healthy: "
        "not a shared cause"
    )


def test_the_whole_fleet_slow_together_holds_every_drain_back() -> None:
    slowed = {n: bw / 6 for n, bw in HEALTHY_NOW.items()}
    hold, line = judge_small(READ, ["node03"], view(slowed), 0.34, 3)
    assert hold and "8 of 8 partition nodes" in line and "shared cause suspected" in line


def test_too_few_other_nodes_judged_holds_the_drain_back() -> None:
    few = {"node03": 70 * MB, "node04": 1900 * MB, "node05": 1800 * MB}
    hold, line = judge_small(READ, ["node03"], view(few), 0.34, 3)
    assert hold and "only 2 other partition nodes judged" in line and "nobody drained" in line


def test_plan_for_small_allocations_uses_the_fleet_not_the_allocation_fraction() -> None:
    pol = SlurmPolicy()  # guard_min_allocation 3, max_drain_fraction 0.34
    slow = [("node03", "screener: rd 0.04x peers r9")]
    lone = view({**HEALTHY_NOW, "node03": 70 * MB})
    # before issue 27: 1 of 1 allocated > 0.34, nobody drained
    assert plan_drains(slow, 1, 8, set(), pol).guard is not None
    plan = plan_drains(slow, 1, 8, set(), pol, lone, ["node03"])
    assert plan.drain == tuple(slow) and plan.guard is None
    assert plan.basis is not None and "1 of 8" in plan.basis
    two = plan_drains(slow, 2, 8, set(), pol, lone, ["node03", "node04"])
    assert two.drain == tuple(slow)
    shared = view({n: bw / 6 for n, bw in HEALTHY_NOW.items()})
    held = plan_drains(slow, 1, 8, set(), pol, shared, ["node03"])
    assert held.drain == () and held.blocked == ("node03",)
    assert held.guard is not None and held.guard.startswith("guard: fleet: 8 of 8")
    # the partition guard still counts: 2 distinct of 8 within its window > 0.2
    busy = plan_drains(slow, 1, 8, {"node05"}, pol, lone, ["node03"])
    assert busy.drain == () and busy.guard is not None and "2 distinct of 8" in busy.guard
    # a large allocation keeps the allocation-fraction guard, fleet or not
    big = plan_drains(
        [("n1", "r"), ("n2", "r")], 4, 100, set(), pol, lone, ["n1", "n2", "n3", "n4"]
    )
    assert big.guard is not None and "2 of 4 allocated" in big.guard


def test_a_write_slow_node_is_judged_on_the_fleets_writes_not_its_reads() -> None:
    """CI, 16 one-node prologs on 2 cores: node09 wrote at 0.38x, every write of the burst
    had dropped, the reads had not; judged on reads it was "1 of 18" and drained."""
    reads = {n: bw for n, bw in HEALTHY_NOW.items()}
    writes_now = {n: bw / 4 for n, bw in HEALTHY_NOW.items()}
    figures = FleetFigures(
        {"read": reads, "write": writes_now}, {"read": USUAL, "write": USUAL}, 900
    )
    v = fleet_view(figures, drop=0.5)
    hold, line = judge_small({"node03": "write"}, ["node03"], v, 0.34, 3)
    assert hold and "8 of 8 partition nodes probed within 900s write slow" in line
    hold, line = judge_small({"node03": "read"}, ["node03"], v, 0.34, 3)
    assert not hold and "read slow (node03)" in line  # as a read-slow node: one node


def test_newest_figures_see_unfinished_runs_newest_round_first(db_store: Store) -> None:
    """A concurrent prolog's round 1 is stored before it judges: the guard sees it."""
    records = SlurmRecords(db_store)
    old = db_store.start_run(Trigger.SWEEP, ["node01", "node02"], {}, None, "x", at(0))
    db_store.record_probe(old, full_probe("node01"), 1)
    db_store.record_probe(old, full_probe("node02"), 1)
    db_store.finish_run(old, at(0.01))
    new = db_store.start_run(Trigger.PROLOG, ["node01", "node03"], {}, "7", "x", at(1))
    p = full_probe("node01")
    assert p.seq_read is not None and p.seq_write is not None
    slower = dataclasses.replace(p, seq_read=dataclasses.replace(p.seq_read, bw_bytes=5e7))
    db_store.record_probe(new, p, 1)
    db_store.record_probe(new, slower, 2)  # the run is still open: no verdicts, no finish
    db_store.record_probe(new, error_probe("node03"), 1)
    got = records.newest_figures(["node01", "node02", "node03"], at(0.5))
    # node02 too old, node03 failed, node01's round 2 (read and write of that round)
    assert got == {"node01": (new, {"read": 5e7, "write": p.seq_write.bw_bytes}, None)}
    wider = records.newest_figures(["node01", "node02"], at(1) - timedelta(hours=2))
    both = {"read": p.seq_read.bw_bytes, "write": p.seq_write.bw_bytes}
    assert wider["node02"] == (old, both, None)
    assert wider["node01"].run_id == new
    # each round says its recipe: the peer yardstick compares like with like
    triage = db_store.start_run(Trigger.PROLOG, ["node02"], {}, "8", "node02", at(1))
    db_store.record_probe(triage, dataclasses.replace(full_probe("node02"), recipe="tri"), 1)
    assert records.newest_figures(["node02"], at(0.5))["node02"].recipe == "tri"
    assert records.newest_figures([], at(0)) == {}


def test_usual_figures_leave_out_the_run_being_judged(db_store: Store) -> None:
    """A burst's own finished runs are not their own yardstick: on a store whose only
    baselines are the burst's, nobody has a usual level (the CI hang of 2026-11-24)."""
    records = SlurmRecords(db_store)
    runs = []
    for hours in (0, 1):
        run = db_store.start_run(Trigger.PROLOG, ["node01"], {}, "7", "x", at(hours))
        db_store.record_probe(run, full_probe("node01"), 1)
        db_store.record_verdicts(
            run, RunSummary((verdict("node01", Status.OK, read_mb_s=1000.0 + hours),))
        )
        db_store.finish_run(run, at(hours + 0.01))
        runs.append(run)
    got = records.usual_figures(["node01"], 5, None, None, skip_runs={"node01": runs[1]})
    assert got["read"] == {"node01": [1000.0 * MB]}
    got = records.usual_figures(["node01"], 5, None, None, skip_runs={"node01": runs[0]})
    assert got["read"] == {"node01": [1001.0 * MB]}
    both = records.usual_figures(["node01"], 5, None, None, skip_runs={})
    assert both["read"] == {"node01": [1001.0 * MB, 1000.0 * MB]}
    assert records.usual_figures(["node01"], 1, None, None, skip_runs={})["read"] == {
        "node01": [1001.0 * MB]
    }


def test_in_job_attribution_of_a_small_job_says_too_few_nodes_not_none() -> None:
    """1-2 node jobs: the epilog says it could not compare, never `in-job slow: none`."""
    from screener.epilog.ingest import ingested_line
    from screener.hooks.injob import MIN_COMPARED, NodeJobIo, compared, outliers
    from screener.ingest.judge import JobFigures
    from screener.ingest.service import Ingested

    note = "2 nodes, fewer than verdict.min_peers=4: no outlier judgement"
    line = ingested_line(Ingested("5", JobFigures((), (), (note,)), "block", 3), "comment")
    assert line.endswith(
        "in-job slow: too few nodes to compare (2 nodes, fewer than verdict.min_peers=4)"
    )
    io = {
        n: NodeJobIo(n, r_await_ms=ms, rkb_s=1e5, util_pct=50, samples=4)
        for n, ms in (("node01", 2.0), ("node02", 90.0))
    }
    assert outliers(io, 4.0, 10.0) == {} and compared(io) == 2 < MIN_COMPARED
    io["node03"] = NodeJobIo("node03", r_await_ms=2.5, rkb_s=1e5, util_pct=50, samples=4)
    assert compared(io) == MIN_COMPARED and list(outliers(io, 4.0, 10.0)) == ["node02"]
    assert compared(io, min_samples=5) == 0


def test_unprobed_in_flight_names_what_concurrent_runs_have_not_stored(db_store: Store) -> None:
    records = SlurmRecords(db_store)
    other = db_store.start_run(Trigger.PROLOG, ["node01", "node02"], {}, "8", "node[01-02]", at(1))
    own = db_store.start_run(Trigger.PROLOG, ["node03"], {}, "9", "node03", at(1))
    everyone = ["node01", "node02", "node03", "node04"]
    assert records.unprobed_in_flight(everyone, at(0.5), own) == {"node01", "node02"}
    db_store.record_probe(other, full_probe("node01"), 1)
    assert records.unprobed_in_flight(everyone, at(0.5), own) == {"node02"}
    assert records.unprobed_in_flight(["node01"], at(0.5), own) == set()  # partition only
    assert records.unprobed_in_flight(everyone, at(1.5), own) == set()  # older than the window
    db_store.record_probe(other, error_probe("node02"), 1)  # a failed probe is a stored round
    assert records.unprobed_in_flight(everyone, at(0.5), own) == set()
    late = db_store.start_run(Trigger.PROLOG, ["node04"], {}, "10", "node04", at(1))
    db_store.finish_run(late, at(1.1), "failed")  # a run that ended stores nothing more
    assert records.unprobed_in_flight(everyone, at(0.5), own) == set()
    assert records.unprobed_in_flight(everyone, at(0.5), None) == {"node03"}


# Issue 44, "day one": a store with no sweep, eight screened 1-node jobs at once on nodes
# paced at 300 MB/s; seven read alike (OK), node03 reads at 1/25 (write/read 23.9x).
BURST = {f"node0{i}": bw * MB for i, bw in enumerate([296, 241, 12.6, 188, 275, 302, 260, 310], 1)}


def peers(
    now: dict[str, float], recipes: dict[str, str | None] | None = None, drop: float = 0.25
) -> FleetView:
    """The fleet's reads on a store with no usual level for anyone."""
    return fleet_view(FleetFigures({"read": now}, {"read": {}}, 900, recipes or {}), drop)


def test_day_one_the_bursts_figures_are_each_others_yardstick() -> None:
    v = peers(BURST)
    assert v.yardstick["read"] == "peers"
    assert v.judged["read"] == frozenset(BURST) and v.slow["read"] == {"node03"}
    # node03 against the median of the other seven (275 MB/s), never its own figure
    assert v.ratio["read"]["node03"] == pytest.approx(12.6 / 275)
    # node04 (188 MB/s) against the others' median, node03 among them: 0.68x, not slow
    assert v.ratio["read"]["node04"] == pytest.approx(188 / 275)
    hold, line = judge_small(READ, ["node03"], v, 0.34, 3)
    assert not hold
    assert line == (
        "fleet: 7 other partition nodes judged (read) within 900s against each other's recent "
        "figures (no usual level yet); node03 read 0.05x their median (< 0.25): 1 of 8 read "
        "slow (node03), 7 healthy: not a shared cause"
    )
    plan = plan_drains(
        [("node03", "screener: rd w/r 23.9x r9")], 1, 8, set(), SlurmPolicy(), v, ["node03"]
    )
    assert plan.drain == (("node03", "screener: rd w/r 23.9x r9"),) and plan.guard is None


def test_a_figure_is_never_its_own_yardstick() -> None:
    assert peers({"node03": 12.6 * MB}).judged["read"] == frozenset()
    two = peers({"node03": 12.6 * MB, "node04": 300 * MB})
    assert two.ratio["read"] == pytest.approx({"node03": 0.042, "node04": 23.8}, rel=0.01)
    assert two.slow["read"] == {"node03"}


def test_a_burst_node_its_verdict_called_slow_but_the_others_do_not_is_held() -> None:
    """CI's 16-prolog burst: a healthy node starved of the 2 cores was called SLOW with no
    peers; beside the burst's other figures it is not below 0.25x: no drain on that alone."""
    starved = {**BURST, "node03": 110 * MB}
    hold, line = judge_small(READ, ["node03"], peers(starved), 0.34, 3)
    assert hold
    assert line.endswith(
        "; node03 read 0.40x their median (not < 0.25): node03 not slow beside them: no "
        "evidence but its own run's, nobody drained"
    )
    held = plan_drains([("node03", "r")], 1, 8, set(), SlurmPolicy(), peers(starved), ["node03"])
    assert held.drain == () and held.blocked == ("node03",)


def test_a_day_one_burst_all_slow_together_drains_nobody() -> None:
    """Every node reads 6x slower at once (write/read 6x: each 1-node verdict SLOW): beside
    each other none is slow, so no verdict is confirmed and nobody is drained."""
    shared = {n: 50 * MB for n in BURST}
    hold, line = judge_small(READ, ["node03"], peers(shared), 0.34, 3)
    assert hold and "node03 read 1.00x their median (not < 0.25)" in line
    assert line.endswith(
        "node03 not slow beside them: no evidence but its own run's, nobody drained"
    )


def test_half_the_burst_far_below_the_rest_is_a_shared_cause() -> None:
    slowed = {n: bw / 25 if n in ("node01", "node02", "node04") else bw for n, bw in BURST.items()}
    hold, line = judge_small(READ, ["node03"], peers(slowed), 0.34, 3)
    assert hold and line.endswith(
        ": 4 of 8 read slow (node[01-04]), 4 healthy (> 0.34): shared cause suspected, "
        "nobody drained"
    )


def test_too_few_peers_says_exactly_why_nobody_is_drained() -> None:
    few = {n: BURST[n] for n in ("node01", "node02", "node03")}
    hold, line = judge_small(READ, ["node03"], peers(few), 0.34, 3)
    assert hold and line == (
        "fleet: only 2 other partition nodes judged (read) within 900s against each other's "
        "recent figures (no usual level yet) (< 3): too little evidence to tell one node from "
        "a shared cause, nobody drained"
    )
    hold, line = judge_small(READ, ["node03"], peers({"node03": 12.6 * MB}), 0.34, 3)
    assert hold and "only 0 other" in line
    assert "(< 3; no other partition node probed within the window)" in line
    # probed with recipes nobody else used (a triage here, a sweep there): not comparable
    mixed = peers(few, {"node01": "triage", "node02": "sweep", "node03": "full"})
    hold, line = judge_small(READ, ["node03"], mixed, 0.34, 3)
    assert hold and "only 0 other" in line
    assert "(< 3; node[01-02] probed, no other figure of their recipe)" in line


def test_peers_of_another_recipe_are_not_the_yardstick() -> None:
    """Seven triage reads judge each other; node03's full-probe read has no peer of its
    recipe, so the fleet cannot say it is slow: held, and the line says so."""
    recipes: dict[str, str | None] = {n: "triage" for n in BURST}
    recipes["node03"] = "full"
    v = peers(BURST, recipes)
    assert v.judged["read"] == frozenset(BURST) - {"node03"} and v.slow["read"] == frozenset()
    hold, line = judge_small(READ, ["node03"], v, 0.34, 3)
    assert hold and "node03 read: no figure beside theirs (none, or another recipe)" in line


def test_any_usual_level_keeps_the_usual_yardstick() -> None:
    """One node with a baseline gives the fleet a usual level: every node is judged against
    it (or its own), as before issue 44, and the line says nothing of each other."""
    v = fleet_view(
        FleetFigures({"read": BURST}, {"read": {"node01": [290 * MB, 300 * MB]}}, 900), 0.25
    )
    assert v.yardstick["read"] == "usual" and v.slow["read"] == {"node03"}
    hold, line = judge_small(READ, ["node03"], v, 0.34, 3)
    assert not hold and line == (
        "fleet: 1 of 8 partition nodes probed within 900s read slow (node03), 7 healthy: "
        "not a shared cause"
    )


def test_each_direction_says_its_own_yardstick() -> None:
    """Reads with a usual level, writes without (triage baselines have no write)."""
    writes = {n: 300 * MB for n in BURST} | {"node05": 20 * MB}
    usual = {n: [290 * MB, 300 * MB] for n in BURST}
    v = fleet_view(FleetFigures({"read": BURST, "write": writes}, {"read": usual}, 900), 0.25)
    assert v.yardstick == {"read": "usual", "write": "peers"}
    assert v.slow == {"read": {"node03"}, "write": {"node05"}}
    new = {"node03": "read", "node05": "write"}
    hold, line = judge_small(new, ["node03", "node05"], v, 0.34, 3)
    assert not hold and line == (
        "fleet: 6 other partition nodes judged (read/write) within 900s (read against usual "
        "levels, write against each other's recent figures (no usual level yet)); node05 "
        "write 0.07x their median (< 0.25): 2 of 8 read/write slow (node[03,05]), 6 healthy: "
        "not a shared cause"
    )
