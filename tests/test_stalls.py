"""Stall modes (issue 24): a bimodal latency histogram is flagged DEGRADED with the stall's
length and rate, from real fio outputs of the emulated cluster (tests/data/probe/stalls)."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from screener.policy import VerdictPolicy
from screener.probe.fio import parse_fio
from screener.probe.stalls import stall_mode
from screener.probe_data import NodeProbe, Status
from screener.verdict.confirm import is_suspect
from screener.verdict.judge import evaluate

DATA = Path(__file__).parent / "data" / "probe" / "stalls"


def captured_round(name: str) -> list[NodeProbe]:
    """A captured round (tests/data/probe/stalls/NAME.json.gz: node -> raw fio) as probes."""
    with gzip.open(DATA / f"{name}.json.gz", "rt") as f:
        raw: dict[str, str] = json.load(f)
    probes = []
    for node, text in sorted(raw.items()):
        run = parse_fio(text, node)
        probes.append(
            NodeProbe(
                node,
                seq_write=run.job("seq_write"),
                seq_read=run.job("seq_read"),
                rand_read=run.job("rand_read"),
            )
        )
    return probes


def test_a_histogram_with_a_gap_has_a_stall_mode_of_the_ios_above_it() -> None:
    body = [(float(ms) * 1e6, 100) for ms in range(5, 40)]
    stalled = [(150e6, 30), (160e6, 34)]
    mode = stall_mode(body + stalled, iodepth=32)
    assert mode is not None
    assert (mode.ios, mode.start_ns, mode.median_ns) == (64, 150e6, 160e6)


@pytest.mark.parametrize(
    "tail",
    [
        [(70e6, 5), (150e6, 5)],  # fewer than half a queue depth above any gap
        [(45e6, 100), (60e6, 100), (80e6, 100)],  # continuous: no empty stretch
        [(40e6, 64)],  # a gap, but under 50 ms: jitter
    ],
)
def test_no_stall_mode_without_a_gap_enough_ios_and_length(tail: list[tuple[float, int]]) -> None:
    body = [(float(ms) * 1e6, 100) for ms in range(5, 30)]
    assert stall_mode(body + tail, iodepth=32) is None


def test_a_slower_body_is_not_a_stall() -> None:
    """A node that is only slow shifts its whole histogram: no mode apart from the body."""
    assert stall_mode([(float(ms) * 1e6, 50) for ms in range(100, 400, 5)], iodepth=32) is None


def test_parsed_jobs_carry_the_stall_mode_and_queue_depth() -> None:
    probes = {p.node: p for p in captured_round("light_150ms_every_1s")}
    read = probes["node04"].seq_read
    assert read is not None and read.iodepth == 32
    assert read.stall_ios == 95 and 140e6 < read.stall_ns < 260e6
    others = [p.seq_read for n, p in probes.items() if n != "node04"]
    assert all(j is not None and j.stall_ios == 0 for j in others)


def test_light_stalls_missed_by_bandwidth_and_tails_are_degraded_with_length_and_rate() -> None:
    summary = evaluate(captured_round("light_150ms_every_1s"), {}, VerdictPolicy())
    by = {v.node: v for v in summary.verdicts}
    v = by["node04"]
    assert v.status == Status.DEGRADED and v.signals == ("stalls",)
    assert "seq read stalls: 95 reads waited ~156 ms" in v.reason
    assert "~3 stalls in 2.1 s, one every ~0.7 s" in v.reason
    assert not v.baseline and not is_suspect(v)  # probed again next time, never drained
    assert all(by[n].status == Status.OK for n in by if n != "node04")


def test_heavy_stalls_are_slow_by_their_tail_and_say_the_stall() -> None:
    by = {
        v.node: v
        for v in evaluate(captured_round("heavy_500ms_every_1.5s"), {}, VerdictPolicy()).verdicts
    }
    assert by["node04"].status == Status.SLOW_READ
    assert {"peer_tail", "stalls"} <= set(by["node04"].signals)
    assert "reads waited ~531 ms" in by["node04"].reason
    assert all(by[n].status == Status.OK for n in by if n != "node04")


def test_a_hiccup_of_the_peers_size_is_not_a_stall() -> None:
    probes = captured_round("healthy_with_hiccup")
    hiccup = {p.node: p for p in probes}["node03"].seq_read
    assert hiccup is not None and hiccup.stall_ios == 32  # the mode is there ...
    summary = evaluate(probes, {}, VerdictPolicy())
    assert {v.status for v in summary.verdicts} == {Status.OK}  # ... but ~1x the peers' p99.9


def test_stalls_on_most_of_the_round_are_not_one_nodes_fault() -> None:
    probes = captured_round("light_150ms_every_1s")
    stalled = {p.node: p for p in probes}["node04"]
    same = [
        replace(p, seq_read=stalled.seq_read, rand_read=stalled.rand_read) if i < 5 else p
        for i, p in enumerate(probes)
    ]
    summary = evaluate(same, {}, VerdictPolicy())
    assert all("stalls" not in v.signals for v in summary.verdicts)


def test_stalls_in_shadow_are_ok_with_what_they_would_have_flagged() -> None:
    policy = VerdictPolicy(shadow=("stalls",))
    by = {v.node: v for v in evaluate(captured_round("light_150ms_every_1s"), {}, policy).verdicts}
    assert by["node04"].status == Status.OK
    assert by["node04"].reason.startswith("would have flagged (shadow: stalls): seq read stalls")
    assert by["node04"].signals == ("shadow:stalls",) and not by["node04"].baseline


def test_one_wait_of_a_short_reads_whole_queue_is_no_slow_share() -> None:
    """A 0.5 s triage read at QD8: one hiccup of the whole queue is 5% of its reads. Captured
    on the loaded emulated cluster (node06, 9 of 179 reads >= 100 ms): it made node06 a
    slow_ios suspect and cost a healthy job a 14 s full probe. Two queues' worth still is
    a share."""
    probes = captured_round("triage_qd8_one_hiccup")
    node06 = next(p for p in probes if p.node == "node06")
    assert node06.seq_read is not None and node06.seq_read.iodepth == 8
    slow = node06.seq_read.slow_fraction * node06.seq_read.total_ios
    assert node06.seq_read.slow_fraction > 0.05 and 8 <= slow < 16
    by = {v.node: v for v in evaluate(probes, {}, VerdictPolicy()).verdicts}
    assert {v.status for v in by.values()} == {Status.OK}, by["node06"].reason
    assert not is_suspect(by["node06"])
    # twice as many slow reads (two waits of the queue): a share, the rule fires
    read = node06.seq_read
    doubled = replace(read, slow_fraction=read.slow_fraction * 2)
    probes = [replace(p, seq_read=doubled) if p.node == "node06" else p for p in probes]
    again = {v.node: v for v in evaluate(probes, {}, VerdictPolicy()).verdicts}
    assert "slow_ios" in again["node06"].signals, again["node06"].reason
