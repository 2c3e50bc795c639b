"""Decisive in round 1 on one window (verdict.confirm.steady_slow): a seq read ten times
below its peers whose reads were slow through the window (median completion >= 10x the
peers', over two turns of its queue) needs no re-probe; one hang of the whole queue does.
Real triage rounds of the emulated cluster (tests/data/probe/README.md, stalls/)."""

from __future__ import annotations

from dataclasses import replace

from screener.policy import VerdictPolicy
from screener.probe_data import Status
from screener.verdict.confirm import STEADY_TURNS, decisive, steady_slow, suspects
from screener.verdict.judge import evaluate
from tests.test_stalls import captured_round as _round

POLICY = VerdictPolicy()


def test_a_byte_capped_reader_is_decided_by_its_own_window() -> None:
    # node01 read at 1/20 of the unpaced fleet's median under a bandwidth cap: its 4 KiB
    # random read stays above its gap, so before steady_slow it was re-probed (4.7 s).
    probes = _round("triage_qd8_mixed_1in20")
    summary = evaluate(probes, {}, POLICY)
    by = {v.node: v for v in summary.verdicts}
    # without their history the slower pair (node05, node07 at 0.6x) are suspects too
    assert by["node01"].status == Status.SLOW_READ and "node01" in suspects(summary)
    assert by["node01"].read_place is not None and by["node01"].read_place <= 0.1
    rand = by["node01"].rand_read_iops
    assert rand is not None and summary.peer_rand_median_iops is not None
    assert rand > POLICY.rand_peer_drop * summary.peer_rand_median_iops  # not that evidence
    assert decisive(summary, len(probes), POLICY) == {}  # without the probes: re-probed
    sure = decisive(summary, len(probes), POLICY, probes=probes)
    assert list(sure) == ["node01"]  # the pair's reads were not slow throughout
    assert "slow through its window: median read" in sure["node01"], sure
    assert decisive(summary, len(probes), VerdictPolicy(decisive_ratio=0.0), probes=probes) == {}


def test_one_hang_of_the_whole_queue_is_not_a_window_slow_throughout() -> None:
    # The same reads, had only one queue's worth completed (a hang of the window: each read
    # waited it) or under two turns: the re-probe decides.
    probes = _round("triage_qd8_mixed_1in20")
    node01 = next(p for p in probes if p.node == "node01")
    assert node01.seq_read is not None and node01.seq_read.iodepth == 8
    assert node01.seq_read.total_ios >= STEADY_TURNS * 8
    assert steady_slow("node01", probes, 0.1) is not None
    for ios in (8, STEADY_TURNS * 8 - 1):
        hung = replace(node01, seq_read=replace(node01.seq_read, total_ios=ios))
        round1 = [hung if p.node == "node01" else p for p in probes]
        assert steady_slow("node01", round1, 0.1) is None
        assert decisive(evaluate(round1, {}, POLICY), len(round1), POLICY, probes=round1) == {}


def test_no_healthy_node_of_a_hiccup_or_of_the_fleet_reads_slow_throughout() -> None:
    for name in ("triage_qd8_mixed_1in20", "triage_qd8_one_hiccup"):
        probes = _round(name)
        healthy = [p.node for p in probes if p.node != "node01" or "1in20" not in name]
        assert healthy and all(steady_slow(n, probes, 0.1) is None for n in healthy)
