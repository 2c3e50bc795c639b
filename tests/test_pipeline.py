"""The screening pipeline end to end on the emulated cluster: real sshd, real fio, real iostat.

Each test injects a fault with the minicluster (blkio throttles, sshd stopped, fio hidden,
scratch full) and checks the verdicts the pipeline reaches over asyncssh.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from screener.app import make_transport
from screener.pipeline import ScreenRequest, ScreenResult, screen
from screener.policy import Policy, policy_from_dict
from screener.probe_data import RunSummary, Status, Trigger
from screener.store import open_store

pytestmark = pytest.mark.cluster

SLOW_BPS = 20_000_000  # 20 MB/s: the session cluster paces every device at 300 MB/s


def cluster_policy(cluster: Any, **verdict: Any) -> Policy:
    """Short probes sized for the emulated nodes (1 GiB loop filesystems, 2 cores)."""
    return policy_from_dict(
        {
            "probe": {"target": cluster.scratch, "size_mib": 64, "runtime_s": 1.0, "ramp_s": 0.25},
            "transport": {
                "ssh_config": str(cluster.ssh_config),
                "known_hosts": str(cluster.known_hosts),
                "connect_timeout_s": 5.0,
                "command_timeout_s": 60.0,
            },
            "verdict": verdict,
        }
    )


def run(cluster: Any, policy: Policy, store: Any = None, **kw: Any) -> ScreenResult:
    async def go() -> ScreenResult:
        transport = make_transport(policy.transport)
        try:
            request = ScreenRequest(tuple(cluster.nodes), policy, **kw)
            return await screen(request, transport, store)
        finally:
            await transport.close()

    return asyncio.run(go())


def statuses(result: ScreenResult) -> dict[str, Status]:
    return {v.node: v.status for v in result.summary.verdicts}


# Evidence a loaded 2-core host can leave on a healthy peer in a 1.5 s probe: a soft rule
# (a stall mode, a close call) or a re-probe that was slow twice but not clearly. Each makes
# it DEGRADED, which is never drained; nothing else may reach a healthy peer.
NOISE_SIGNALS = frozenset({"stalls", "close_call", "borderline"})


def assert_peers_unharmed(result: ScreenResult, bad: str) -> None:
    """Every node but ``bad`` was probed without error and judged OK, except at most two
    DEGRADED by noise-only evidence: the fault does not spread, and noise drains nobody.
    Two, not one: CI on e32ff2d at load ~6 left a stall mode (32 reads ~51 ms) on one
    healthy peer and a second healthy peer DEGRADED in the same 1.5 s probe."""
    others = [v for v in result.summary.verdicts if v.node != bad]
    assert all(result.probes[v.node].error_kind is None for v in others), result.summary
    noisy = [v for v in others if v.status != Status.OK]
    assert len(noisy) <= 2, result.summary
    for v in noisy:
        assert v.status == Status.DEGRADED and set(v.signals) <= NOISE_SIGNALS, v


def test_slow_sequential_read_node_is_slow_read_and_peers_ok(cluster: Any, tmp_path: Path) -> None:
    slow = cluster.nodes[1]
    cluster.inject(slow, "slow_read", SLOW_BPS)
    store = open_store(f"sqlite:///{tmp_path}/s.db", upgrade=True)
    # the re-probe path (20 MB/s against GB/s peers is decisive at the default 0.1)
    policy = cluster_policy(cluster, decisive_ratio=0.0)
    result = run(cluster, policy, store, trigger=Trigger.MANUAL)
    got = statuses(result)
    assert got[slow] == Status.SLOW_READ, result.summary
    assert set(got) == set(cluster.nodes), result.summary
    assert_peers_unharmed(result, slow)
    v = next(v for v in result.summary.verdicts if v.node == slow)
    # re-probed with it: at most a peer that noise left a close call in round 1
    assert v.confirmed and slow in result.reprobed and len(result.reprobed) <= 2, result
    assert v.read_mb_s is not None and v.read_mb_s < 30  # about the injected 20 MB/s
    assert v.write_mb_s is not None and v.write_mb_s > 5 * v.read_mb_s
    # iostat watched the node's own loop device while fio read from it
    probe = result.probes[slow]
    assert probe.iostat and {s.device for s in probe.iostat} == {probe.facts.device}
    assert max(s.rkb_s for s in probe.iostat) * 1000 < 1.5 * SLOW_BPS
    # the run and its verdicts are in the store
    assert result.run_id is not None
    stored = {v.node: v.status for v in store.run_verdicts(result.run_id)}
    assert stored == got
    # its slow seq read alone confirmed it: round 2 ran only that job, under round 1's recipe
    first, again = (
        {p.node: p for p in store.run_probes(result.run_id, n) if p.node == slow} for n in (1, 2)
    )
    assert first[slow].seq_write is not None and first[slow].rand_read is not None
    assert again[slow].seq_read is not None
    assert (again[slow].seq_write, again[slow].rand_read) == (None, None)
    assert again[slow].recipe == first[slow].recipe


def test_slow_random_read_only_is_flagged(cluster: Any) -> None:
    slow = cluster.nodes[2]
    cluster.inject(slow, "slow_randread", 300)
    seen: list[RunSummary] = []

    async def keep(first: RunSummary) -> None:
        seen.append(first)

    # decisive_ratio 0: 300 IOPS caps its 1 MiB reads at ~300 MB/s, which on a host whose
    # unpaced peers read >= 3 GB/s is <= 0.1x in both read jobs, decided in round 1 with no
    # re-probe (CI, 2026-11-27: peers at 3,562 MB/s); this test is about the re-probe
    result = run(cluster, cluster_policy(cluster, decisive_ratio=0.0), between_rounds=keep)
    first = next(v for v in seen[0].verdicts if v.node == slow)
    assert "peer_rand" in first.signals, first
    v = next(v for v in result.summary.verdicts if v.node == slow)
    assert v.status == Status.SLOW_READ and v.confirmed, v
    # 300 IOPS caps its 1 MiB reads too: the re-probe confirms that finding with the seq
    # read alone when round 1 saw it, else it re-runs the random read
    want = {"peer_read"} if "peer_read" in first.signals else {"peer_rand"}
    assert want <= set(v.signals), v
    assert_peers_unharmed(result, slow)


def test_transient_slowness_healed_before_confirmation_is_not_slow(cluster: Any) -> None:
    slow = cluster.nodes[0]
    cluster.inject(slow, "slow_read", SLOW_BPS)
    seen: list[RunSummary] = []

    async def heal_between(first: RunSummary) -> None:
        seen.append(first)
        await asyncio.to_thread(cluster.heal, slow)

    # decisive_ratio 0: at the default 0.1 a node this slow in both read jobs is decided in
    # round 1 (test_a_decisive_slow_reader_is_decided_in_one_round); above it, a re-probe
    policy = cluster_policy(cluster, decisive_ratio=0.0)
    result = run(cluster, policy, between_rounds=heal_between)
    first = {v.node: v.status for v in seen[0].verdicts}
    assert first[slow] == Status.SLOW_READ  # the first probe did see it
    v = next(v for v in result.summary.verdicts if v.node == slow)
    assert v.status == Status.OK and v.reason.startswith("transient:"), v
    assert not any(s.startswith("SLOW") for s in statuses(result).values())


def test_all_nodes_slow_together_is_shared_cause(cluster: Any) -> None:
    for n in cluster.nodes:
        cluster.inject(n, "slow_read", SLOW_BPS)
    result = run(cluster, cluster_policy(cluster))
    assert result.summary.shared_cause, result.summary
    assert not any(s.startswith("SLOW") for s in statuses(result).values())
    assert result.rounds == 1  # nobody is a suspect, nothing to confirm


@pytest.mark.parametrize(
    ("fault", "kind", "words"),
    [
        ("unreachable", "unreachable", "unreachable"),
        ("no_fio", "probe", "fio not found"),
        ("full_scratch", "probe", "free space"),
    ],
)
def test_errors_are_unknown_with_reason(cluster: Any, fault: str, kind: str, words: str) -> None:
    bad = cluster.nodes[3]
    cluster.inject(bad, fault)
    result = run(cluster, cluster_policy(cluster))
    v = next(v for v in result.summary.verdicts if v.node == bad)
    assert v.status == Status.UNKNOWN, v
    assert words in v.reason, v.reason
    assert result.probes[bad].error_kind == kind
    # the others were probed and judged as usual: the error does not spread to them
    assert_peers_unharmed(result, bad)


def test_unknown_host_key_is_refused(cluster: Any, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    policy = cluster_policy(cluster)
    policy = dataclasses.replace(
        policy, transport=dataclasses.replace(policy.transport, known_hosts=str(empty))
    )
    result = run(cluster, policy)
    for v in result.summary.verdicts:
        assert v.status == Status.UNKNOWN
        assert "host key" in v.reason and "known_hosts" in v.reason, v.reason
    assert {p.error_kind for p in result.probes.values()} == {"hostkey"}


def test_extremely_slow_reader_is_slow_not_unknown(cluster: Any) -> None:
    # seed 001's worst node read ~6,000x slower than its peers. At 2 MB/s the 32 reads in
    # flight take ~16 s to drain after fio's time is up: the probe must wait for them and
    # call the node SLOW_READ, not give up and call it UNKNOWN.
    slow = cluster.nodes[4]
    cluster.inject(slow, "slow_read", 2_000_000)
    result = run(cluster, cluster_policy(cluster))
    v = next(v for v in result.summary.verdicts if v.node == slow)
    assert v.status == Status.SLOW_READ and v.confirmed, v
    assert v.read_mb_s is not None and v.read_mb_s < 5
    # the 100 ms mark is plain queueing at this bandwidth (median read far above it), so
    # the share of slow reads is not what says it: the peers and the write/read ratio do
    assert "peer median" in v.reason and "ratio" in v.signals, v


@pytest.mark.serial  # a ratio of real reads: at load 9 (other workers) round 1 missed 10x
def test_a_decisive_slow_reader_is_decided_in_one_round(cluster: Any) -> None:
    # verdict.decisive_ratio (0.1 by default): both read jobs ten times below the peers in
    # round 1 is the evidence a re-probe would add, so the node is confirmed without one
    slow = cluster.nodes[3]
    cluster.inject(slow, "slow_read", 10_000_000)
    # and its 4 KiB reads: 10 MB/s alone leaves them 2,441 IOPS, 0.12x of the paced peers'
    # 20,000 (the session cluster's pace), not ten times below
    cluster.inject(slow, "slow_randread", 1_000)
    result = run(cluster, cluster_policy(cluster))
    v = next(v for v in result.summary.verdicts if v.node == slow)
    assert v.status == Status.SLOW_READ and v.confirmed, v
    assert "decisive in round 1" in v.reason, v
    # no round 2 for it (one runs only if noise left a peer a close call in round 1)
    assert slow not in result.reprobed and len(result.reprobed) <= 1, result
    assert result.rounds == 1 + bool(result.reprobed), result
    assert_peers_unharmed(result, slow)
