"""Verdicts that hold up (issue 8) on the emulated cluster: real sshd, fio, iostat, SQLite.

History of another recipe or era, a fleet-wide slowdown with one much slower node inside
it, an intermittently stalling reader (blkio throttle switched on and off), and round 2
judged on round-2 figures of reference nodes.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_pipeline import assert_peers_unharmed, cluster_policy, run, statuses

from bench.stall import Stall
from screener.pipeline import ScreenResult
from screener.policy import Policy
from screener.probe.fio import recipe_fingerprint
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import Store, open_store
from screener.verdict.confirm import BORDERLINE_TAG
from screener.verdict.rules import MIN_HISTORY

pytestmark = pytest.mark.cluster


def _store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path}/hold.db", upgrade=True)


def _seed_history(store: Store, nodes: list[str], mb_s: float, recipe: str, age: timedelta) -> None:
    """Three baseline verdicts per node at ``mb_s``, ``age`` ago, under ``recipe``."""
    now = datetime.now(UTC)
    for k in range(3):
        started = now - age - timedelta(hours=k)
        rid = store.start_run(Trigger.SWEEP, nodes, {}, None, "seed", started)
        verdicts = tuple(
            Verdict(n, Status.OK, "seed", read_mb_s=mb_s, recipe=recipe, baseline=True)
            for n in nodes
        )
        store.record_verdicts(rid, RunSummary(verdicts))
        store.finish_run(rid, now - age)


def test_history_of_another_recipe_or_era_is_not_used(cluster: Any, tmp_path: Path) -> None:
    policy = cluster_policy(cluster)
    store = _store(tmp_path)
    this = recipe_fingerprint(policy.probe)
    other = recipe_fingerprint(replace(policy.probe, iodepth=1))
    # 500 GB/s: figures from another test (recent) and from this recipe 60 days ago
    _seed_history(store, cluster.nodes, 500_000.0, other, timedelta(hours=1))
    _seed_history(store, cluster.nodes, 500_000.0, this, timedelta(days=60))
    result = run(cluster, policy, store)
    # nobody judged against those figures: no history signal, every node OK but at most
    # one DEGRADED by noise on a loaded host (CI on 6c87672: a stall-noise DEGRADED peer)
    assert not [v for v in result.summary.verdicts if "history" in v.signals], result.summary
    assert_peers_unharmed(result, bad="")
    assert result.run_id is not None
    assert {p.recipe for p in store.run_probes(result.run_id)} == {this}
    # control: the same figures under this recipe and recent do count as history
    _seed_history(store, cluster.nodes, 500_000.0, this, timedelta(minutes=1))
    again = run(cluster, policy, store)
    # every node "dropped" together: the history rule moves with the round's level, so no
    # node is blamed, and each is absolved as a shared cause (it did read its history)
    assert again.summary.shared_cause, again.summary
    assert "their own history" in (again.summary.shared_cause_reason or "")
    assert all("shared_cause" in v.signals for v in again.summary.verdicts), again.summary
    assert set(statuses(again).values()) == {Status.UNKNOWN}


def _until_history(cluster: Any, policy: Policy, store: Store, most: int = 6) -> list[ScreenResult]:
    """Runs until every node holds MIN_HISTORY baselines (a noisy CI host may flag one
    node once, which then stores no baseline and would have no history to drop from)."""
    done: list[ScreenResult] = []
    while len(done) < most:
        done.append(run(cluster, policy, store))
        held = Counter(v.node for r in done for v in r.summary.verdicts if v.baseline)
        if len(done) >= MIN_HISTORY and all(held[n] >= MIN_HISTORY for n in cluster.nodes):
            return done
    raise AssertionError(f"no history after {most} runs: {held}")


def test_fleet_wide_slowdown_finds_the_50x_node_and_history_catches_up(
    cluster: Any, tmp_path: Path
) -> None:
    policy = cluster_policy(cluster)
    store = _store(tmp_path)
    base = _until_history(cluster, policy, store)
    med = statistics.median(r.summary.peer_read_median_mb_s or 0 for r in base)
    wmed = statistics.median(v.write_mb_s or 0 for r in base for v in r.summary.verdicts)
    bad = cluster.nodes[2]
    for n in cluster.nodes:  # reads and writes 6x slower: write/read stays normal
        cluster.inject(n, "slow_read", int(med * 1e6 / 6))
        cluster.inject(n, "slow_write", int(wmed * 1e6 / 6))
    cluster.inject(bad, "slow_read", int(med * 1e6 / 50))
    shifted = [run(cluster, policy, store) for _ in range(3)]
    first = shifted[0]
    got = statuses(first)
    assert first.summary.shared_cause, first.summary
    assert got.pop(bad) == Status.SLOW_READ, first.summary
    assert set(got.values()) == {Status.UNKNOWN}
    assert all(v.baseline for v in first.summary.verdicts if v.node != bad)
    # three absolved runs later the shifted level is the history median: OK, not blind
    last = run(cluster, policy, store)
    got = statuses(last)
    assert got.pop(bad) == Status.SLOW_READ, last.summary
    assert not any("history" in v.signals for v in last.summary.verdicts if v.node != bad)
    # every other node OK, but at most one DEGRADED by noise-only evidence: at ~37 MB/s a
    # loaded 3-worker host left one healthy node a stall-mode DEGRADED once (CI on 064d172)
    assert_peers_unharmed(last, bad)


def test_intermittently_stalling_reader_is_found_on_its_tail(cluster: Any) -> None:
    """The stall's phase is free against the 1 s read window: a re-probe window that meets
    little of a stall reads within noise of loaded references and shows no tail, and the
    node is then `DEGRADED borderline` (slow in both rounds, not clearly the second time:
    never drained, never OK), as in CI on 42980ac (round-2 peers at 265 MB/s beside three
    other workers). That outcome is screened once more, as the next job or sweep would: a
    stall the window does meet is confirmed on its tail. 45 of 45 screens here, alone and
    loaded, were confirmed the first time (the 12 printed: 0.29-0.39x, p99 5x the refs')."""
    policy = cluster_policy(cluster)
    bad = cluster.nodes[3]

    def screen_staller() -> Verdict:
        with Stall(cluster, bad, rate=1_000_000, on_s=0.8, off_s=1.0) as stall:
            result = run(cluster, policy)
        assert stall.cycles >= 3
        assert_peers_unharmed(result, bad)  # OK, or up to two noise-only DEGRADED, loaded
        return next(v for v in result.summary.verdicts if v.node == bad)

    v = screen_staller()
    if v.status != Status.SLOW_READ:
        # the only other outcome a stalling reader may have: slow in both rounds, undrained
        assert v.status == Status.DEGRADED and BORDERLINE_TAG in v.signals, v
        assert "in both rounds" in v.reason, v
        v = screen_staller()
    assert v.status == Status.SLOW_READ and v.confirmed, v
    assert {"peer_tail", "slow_ios"} & set(v.signals), v


def test_round_two_is_judged_beside_reference_nodes(cluster: Any, tmp_path: Path) -> None:
    policy = cluster_policy(cluster, decisive_ratio=0.0)  # a re-probe even at 0.02x
    store = _store(tmp_path)
    slow = cluster.nodes[1]
    cluster.inject(slow, "slow_read", 20_000_000)

    async def everyone_slower(_: RunSummary) -> None:
        # the filesystem gets busier just as round 2 starts: every node reads (and writes)
        # like the suspect; judged on round-1 figures it would be confirmed and drained
        for n in cluster.nodes:
            await asyncio.to_thread(cluster.inject, n, "slow_read", 20_000_000)
            await asyncio.to_thread(cluster.inject, n, "slow_write", 20_000_000)

    result = run(cluster, policy, store, between_rounds=everyone_slower)
    v = next(v for v in result.summary.verdicts if v.node == slow)
    assert v.status == Status.OK and v.reason.startswith("transient:"), v
    assert "3 reference nodes" in v.reason
    assert result.run_id is not None
    round2 = store.run_probes(result.run_id, round_no=2)
    assert slow in {p.node for p in round2} and len(round2) == 4
