"""Confirmation at the cost of the evidence (issue 22): which fio jobs a re-probe runs, how
a re-probe's verdict keeps round 1's figures for the jobs it skipped, and which suspects
round 1 already decided (verdict.decisive_ratio)."""

from __future__ import annotations

import pytest

from screener.policy import VerdictPolicy
from screener.probe.fio import JOBS
from screener.probe_data import RunSummary, Status, Verdict
from screener.verdict.confirm import confirm, confirm_jobs, decided, decisive

READS = ("seq_read", "rand_read")


def verdict(node: str, status: Status, *signals: str, **figures: float) -> Verdict:
    return Verdict(node, status, "; ".join(signals) or "ok", signals=signals, **figures)


def summary(*verdicts: Verdict) -> RunSummary:
    return RunSummary(verdicts=verdicts)


# The signals a 1/20 reader fired in the time_to_start bench (2026-11-26): every read rule.
ONE_IN_TWENTY = ("peer_read", "ratio", "peer_tail", "stalls", "peer_rand")


@pytest.mark.parametrize(
    ("signals", "jobs", "want"),
    [
        (ONE_IN_TWENTY, JOBS, ("seq_read",)),  # the seq read alone confirms it
        (("abs_read",), JOBS, ("seq_read",)),
        (("history",), READS, ("seq_read",)),
        (("close_call",), JOBS, ("seq_read",)),
        (("peer_rand",), JOBS, ("seq_read", "rand_read")),
        (("abs_rand", "peer_tail"), READS, READS),
        (("ratio",), JOBS, ("seq_write", "seq_read")),
        (("peer_write", "abs_write"), JOBS, ("seq_write", "seq_read")),
        (("peer_tail",), JOBS, JOBS),  # a tail of either read job: the whole recipe
        (("slow_ios",), READS, READS),
        (("r_await",), JOBS, JOBS),
        (("peer_write",), READS, READS),  # a write finding but no write in the recipe
    ],
)
def test_each_finding_is_confirmed_by_the_jobs_behind_it(
    signals: tuple[str, ...], jobs: tuple[str, ...], want: tuple[str, ...]
) -> None:
    s = summary(verdict("n1", Status.SLOW_READ, *signals), verdict("n2", Status.OK))
    assert confirm_jobs(s, ["n1"], jobs) == want


def test_the_round_runs_the_union_of_the_suspects_needs_in_recipe_order() -> None:
    s = summary(
        verdict("n1", Status.SLOW_READ, "peer_rand"),
        verdict("n2", Status.SLOW_WRITE, "peer_write"),
        verdict("n3", Status.SLOW_READ, "peer_read", "peer_tail"),
        verdict("n4", Status.OK),
    )
    assert confirm_jobs(s, ["n3"], JOBS) == ("seq_read",)
    assert confirm_jobs(s, ["n3", "n1"], JOBS) == ("seq_read", "rand_read")
    assert confirm_jobs(s, ["n2", "n3", "n1"], JOBS) == JOBS
    # a suspect whose findings need the whole recipe decides for the round
    s2 = summary(verdict("n5", Status.DEGRADED, "r_await"), *s.verdicts)
    assert confirm_jobs(s2, ["n3", "n5"], READS) == READS


def test_a_confirmed_node_keeps_round_1_figures_for_the_jobs_round_2_skipped() -> None:
    first = summary(
        verdict(
            "n1",
            Status.SLOW_READ,
            "peer_read",
            read_mb_s=15.0,
            write_mb_s=300.0,
            ratio=20.0,
            rand_read_iops=3600.0,
            rand_read_p99_ms=98.0,
            z_rand=-41.0,
        ),
        verdict("n2", Status.OK, read_mb_s=300.0),
    )
    second = summary(
        verdict("n1", Status.SLOW_READ, "peer_read", read_mb_s=14.0, peer_read_mb_s=301.0),
        verdict("n2", Status.OK, read_mb_s=301.0),
    )
    v = confirm(first, second, ["n2"]).verdicts[0]
    assert v.confirmed and v.status == Status.SLOW_READ
    assert v.signals == ("peer_read",)  # round 1 fired no rule on the skipped jobs
    assert v.read_mb_s == 14.0  # round 2's figure decides
    assert (v.write_mb_s, v.ratio, v.rand_read_iops) == (300.0, 20.0, 3600.0)
    assert (v.rand_read_p99_ms, v.z_rand) == (98.0, -41.0)


def test_a_reprobe_that_measured_nothing_gets_no_round_1_figures() -> None:
    first = summary(verdict("n1", Status.SLOW_READ, "peer_read", read_mb_s=15.0, write_mb_s=300.0))
    second = summary(verdict("n1", Status.UNKNOWN))
    v = confirm(first, second).verdicts[0]
    assert v.status == Status.UNKNOWN and v.write_mb_s is None and v.read_mb_s is None


def test_a_confirmed_node_keeps_round_1_findings_on_the_skipped_jobs_only() -> None:
    first = summary(
        verdict("n1", Status.SLOW_READ, "peer_read", "ratio", "peer_tail", "peer_rand"),
        verdict("n2", Status.OK),
    )
    second = summary(
        verdict("n1", Status.SLOW_READ, "peer_read", read_mb_s=2.0), verdict("n2", Status.OK)
    )
    v = confirm(first, second, ["n2"]).verdicts[0]
    # the tail was a read job's, which ran again and did not show it: not kept
    assert v.confirmed and v.signals == ("peer_read", "ratio", "peer_rand")
    # a re-probe that passed is transient, whatever round 1 said of the skipped jobs
    passed = summary(verdict("n1", Status.OK, read_mb_s=290.0), verdict("n2", Status.OK))
    t = confirm(first, passed, ["n2"]).verdicts[0]
    assert t.status == Status.OK and t.reason.startswith("transient") and t.signals == ()


def round1(*verdicts: Verdict, shared: bool = False) -> RunSummary:
    return RunSummary(
        verdicts=verdicts,
        shared_cause=shared,
        peer_read_median_mb_s=300.0,
        peer_rand_median_iops=73_000.0,
    )


SLOW_BOTH = ("peer_read", "peer_rand", "peer_tail")


@pytest.mark.parametrize(
    ("read", "iops", "signals", "usable", "shared", "want"),
    [
        (15.0, 3_600.0, SLOW_BOTH, 8, False, True),  # the bench's 1/20 reader
        (30.0, 7_300.0, SLOW_BOTH, 4, False, True),  # exactly 0.1x both, min_peers nodes
        (31.0, 3_600.0, SLOW_BOTH, 8, False, False),  # the seq read above 0.1x
        (15.0, 13_100.0, SLOW_BOTH, 8, False, True),  # 4k at 0.18x: the paced bench's 1/20
        (15.0, 18_250.0, SLOW_BOTH, 8, False, True),  # 4k at 0.25x: its rule's gap (rand_peer_drop)
        (15.0, 18_300.0, SLOW_BOTH, 8, False, False),  # the random read above its gap
        (15.0, 3_600.0, ("peer_read", "abs_rand"), 8, False, False),  # not both peer rules
        (15.0, 3_600.0, SLOW_BOTH, 3, False, False),  # fewer than min_peers usable nodes
        (15.0, 3_600.0, SLOW_BOTH, 8, True, False),  # a shared cause: re-probe
    ],
)
def test_decisive_needs_the_seq_read_far_below_and_the_rand_read_below_its_gap(
    read: float, iops: float, signals: tuple[str, ...], usable: int, shared: bool, want: bool
) -> None:
    s = round1(
        verdict("n1", Status.SLOW_READ, *signals, read_mb_s=read, rand_read_iops=iops),
        verdict("n2", Status.OK, read_mb_s=300.0, rand_read_iops=73_000.0),
        shared=shared,
    )
    assert VerdictPolicy().decisive_ratio == 0.1  # on by default since 2026-11-26
    assert list(decisive(s, usable, VerdictPolicy())) == (["n1"] if want else [])
    assert decisive(s, usable, VerdictPolicy(decisive_ratio=0.0)) == {}  # off: always re-probed


@pytest.mark.parametrize(
    ("read", "signals", "sentinel", "usable", "shared", "want"),
    [
        (15.0, ("peer_read",), 0.05, 8, False, True),  # the bench's rolled 1/20 reader
        (30.0, ("peer_read",), 0.1, 4, False, True),  # exactly 0.1x both, min_peers nodes
        (15.0, ("peer_read",), 0.11, 8, False, False),  # the sentinel read above 0.1x
        (31.0, ("peer_read",), 0.05, 8, False, False),  # the seq read above 0.1x
        (15.0, ("abs_read", "history"), 0.05, 8, False, False),  # not the peer rule
        (15.0, ("peer_read",), 0.05, 3, False, False),  # fewer than min_peers usable nodes
        (15.0, ("peer_read",), 0.05, 8, True, False),  # a shared cause: re-probe
        (15.0, ("peer_read",), None, 8, False, False),  # no earlier window: re-probe
    ],
)
def test_a_failed_sentinel_is_the_first_window_when_the_random_read_is_not_low(
    read: float,
    signals: tuple[str, ...],
    sentinel: float | None,
    usable: int,
    shared: bool,
    want: bool,
) -> None:
    # a bandwidth throttle (the emulation's slow reader) leaves 4 KiB random reads near the
    # peers: only the sentinel read before the screen is a second window as low
    s = round1(
        verdict("n1", Status.SLOW_READ, *signals, read_mb_s=read, rand_read_iops=70_000.0),
        verdict("n2", Status.OK, read_mb_s=300.0, rand_read_iops=73_000.0),
        shared=shared,
    )
    earlier = {} if sentinel is None else {"n1": sentinel}
    got = decisive(s, usable, VerdictPolicy(), earlier)
    assert list(got) == (["n1"] if want else [])
    if want:
        assert f"sentinel read {sentinel:.2f}x its usual" in got["n1"]
    assert decisive(s, usable, VerdictPolicy(decisive_ratio=0.0), earlier) == {}
    # an OK node's sentinel figure never decides anything
    assert "n2" not in decisive(s, usable, VerdictPolicy(), {"n2": 0.01})


def test_a_degraded_or_unmeasured_suspect_is_never_decisive() -> None:
    s = round1(
        verdict("n1", Status.DEGRADED, *SLOW_BOTH, "facts", read_mb_s=15.0, rand_read_iops=3_600.0),
        verdict("n2", Status.SLOW_READ, *SLOW_BOTH, read_mb_s=15.0),  # no random read figure
    )
    assert decisive(s, 8, VerdictPolicy(decisive_ratio=0.1)) == {}
    assert decisive(s, 8, VerdictPolicy(decisive_ratio=0.1), {"n1": 0.01}) == {}


def test_decided_confirms_the_chosen_nodes_and_says_why() -> None:
    s = round1(
        verdict("n1", Status.SLOW_READ, *SLOW_BOTH, read_mb_s=15.0, rand_read_iops=3_600.0),
        verdict("n2", Status.SLOW_READ, "peer_read", read_mb_s=100.0),
    )
    sure = decisive(s, 8, VerdictPolicy())
    assert list(sure) == ["n1"]
    out = {v.node: v for v in decided(s, sure).verdicts}
    assert out["n1"].confirmed and out["n1"].reason.endswith(
        "[decisive in round 1: seq read <= 0.1x and 4k rand read 0.05x the peer medians]"
    )
    assert not out["n2"].confirmed and out["n2"].reason == s.verdicts[1].reason
