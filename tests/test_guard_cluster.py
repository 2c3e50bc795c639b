"""The partition guard and re-offending nodes on the emulated cluster (issue 19 item 1): real
slurmctld runs jobs/prolog-slurmctld, slow reads are blkio throttles, `screener resume` is
the admin's command.

The partition has 5 nodes and ``partition_max_drain_fraction = 0.2``: one drained node
(1/5) is allowed, a second *different* one (2/5) trips the guard. A node drained, resumed
while still slow and slow again is one node, not two: it is drained again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle
from screener.store import open_store, views
from tests.hooked_cluster import (
    PACE_IOPS,
    fio_job,
    job_state,
    module_cluster,
    run_screener,
    sbatch,
    sinfo_nodes,
    site_info,
    wait_for,
    wait_job,
    write_config,
)

pytestmark = pytest.mark.cluster

SLOW = "20M"
NODES = 5


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    yield from module_cluster(tmp_path_factory, "guard", NODES)


@pytest.fixture()
def site(hooked: tuple[ClusterHandle, Path], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A fresh DB and log per test, the guard at 1 of 5 partition nodes; healed after."""
    cluster, d = hooked
    info = site_info(
        cluster,
        d,
        tmp_path,
        slurm={"partition_max_drain_fraction": 0.2, "max_drain_fraction": 0.34},
    )
    yield info
    cluster.reset()


def _submit(site: dict[str, Any], *extra: str, nodes: int = 3) -> str:
    """A screened job writing its hostnames; its id."""
    out = site["out"] / "hosts-%j.txt"
    return sbatch(
        site["cluster"], "-N", str(nodes), "-o", str(out), "--comment", "screener=on", *extra,
        "--wrap", "srun hostname",
    )  # fmt: skip


def _finished(site: dict[str, Any], job_id: str) -> tuple[dict[str, Any], set[str]]:
    """The job run to its end: its last record and the nodes it ran on."""
    job = wait_job(site["cluster"], job_id)
    assert job["job_state"] == "COMPLETED", site["log"].read_text()
    return job, set((site["out"] / f"hosts-{job_id}.txt").read_text().split())


def _screened_job(site: dict[str, Any], *extra: str) -> tuple[dict[str, Any], set[str]]:
    return _finished(site, _submit(site, *extra))


def _requeued_or_done(cluster: ClusterHandle, job_id: str) -> bool:
    job = job_state(cluster, job_id)
    return bool(job["restart_cnt"] >= 1 or job["job_state"] in ("COMPLETED", "FAILED"))


def _actions(site: dict[str, Any], node: str) -> list[str]:
    with open_store(site["db"]) as store:
        return [e.action for e in store.node_events(node) if e.action != "fast_path"]


def test_node_resumed_while_still_slow_is_drained_again(site: dict[str, Any]) -> None:
    cluster = site["cluster"]
    slow = cluster.nodes[0]  # select/linear allocates the lowest idle nodes first
    cluster.inject(slow, "slow_read", SLOW)
    first, ran = _screened_job(site)
    assert first["restart_cnt"] >= 1 and slow not in ran, site["log"].read_text()
    assert "DRAIN" in sinfo_nodes(cluster)[slow]["state_flags"]
    # the admin resumes it although it is still slow
    resumed = run_screener(cluster, site["config"], "resume", slow)
    assert resumed.returncode == 0, resumed.stderr
    assert "DRAIN" not in sinfo_nodes(cluster)[slow]["state_flags"]
    site["log"].write_text("")  # the second job's prolog lines only
    # Slurm need not hand the resumed node out first: hold two healthy nodes with an
    # unscreened job so the 3-node screened job must take it; release them once requeued.
    blocker = sbatch(cluster, "-w", ",".join(cluster.nodes[3:]), "--wrap", "sleep 600")
    wait_for("the blocker to run", lambda: job_state(cluster, blocker)["job_state"] == "RUNNING")
    job_id = _submit(site)
    wait_for("the requeue (or the end)", lambda: _requeued_or_done(cluster, job_id))
    cluster.slurm("scancel", blocker)
    second, ran = _finished(site, job_id)
    log = site["log"].read_text()
    # one node drained twice counts once: 1 of 5, within the guard; drained, job requeued
    assert "guard:" not in log, log
    assert second["restart_cnt"] >= 1, log
    assert slow not in ran and len(ran) == 3, (ran, log)
    assert f"drained {slow}: screener: rd " in log, log
    assert "DRAIN" in sinfo_nodes(cluster)[slow]["state_flags"]
    assert _actions(site, slow) == [
        "drain",
        "drain_pending",
        "resume",
        "drain",
        "drain_pending",
    ]


def test_second_distinct_slow_node_trips_the_partition_guard(site: dict[str, Any]) -> None:
    cluster = site["cluster"]
    # every node probed every time: the second node turns slow after it passed
    write_config(
        site["config"],
        cluster,
        site["db"],
        site["log"],
        prolog={"fresh_s": 0},
        slurm={"partition_max_drain_fraction": 0.2, "max_drain_fraction": 0.34},
    )
    first_slow, second_slow = cluster.nodes[0], cluster.nodes[1]
    cluster.inject(first_slow, "slow_read", SLOW)
    job, ran = _screened_job(site)
    assert job["restart_cnt"] >= 1 and first_slow not in ran, site["log"].read_text()
    # a different node turns slow: it would be the second of 5 drained within the window
    cluster.inject(second_slow, "slow_read", SLOW)
    site["log"].write_text("")
    job, ran = _screened_job(site, "-w", second_slow)
    log = site["log"].read_text()
    assert job["restart_cnt"] == 0 and second_slow in ran, log  # nobody drained: it ran
    assert (
        f"guard: 2 distinct of {NODES} partition nodes drained within 3600s (> 0.2): "
        f"{first_slow} drained before, {second_slow} slow now: nobody drained"
    ) in log, log
    assert "DRAIN" not in sinfo_nodes(cluster)[second_slow]["state_flags"]
    assert _actions(site, second_slow) == ["guard_trip"]
    with open_store(site["db"]) as store:
        run = store.latest_runs(1)[0]
        assert run.job_id == str(job["job_id"])


def test_shared_cause_drains_the_outlier_and_records_the_absolved(site: dict[str, Any]) -> None:
    """Every allocated node reads slowly (a shared cause); one of them 20x slower still: it
    is drained and the job requeued, the others are absolved and the run says why. On the
    shipped policy (triage on) and a new store: nodes never fully probed get the full probe
    first, whose write/read ratio shows the shared slowdown (a read-only triage, with no
    history to compare with, saw 3 nodes like their peers and reported no shared cause)."""
    cluster = site["cluster"]
    write_config(
        site["config"], cluster, site["db"], site["log"],
        slurm={"partition_max_drain_fraction": 0.2, "max_drain_fraction": 0.34},
        # 8 queued 1 MiB reads, not 32: the 1 MB/s outlier drains them in 8 s, not 32 s,
        # after each of its two sequential reads (the test took 97 s, 64 of them that)
        probe={"seq_iodepth": 8},
    )  # fmt: skip
    shared, outlier = cluster.nodes[1:4], cluster.nodes[0]
    for n in shared:
        cluster.inject(n, "slow_read", SLOW)
    cluster.inject(outlier, "slow_read", "1M")
    job_id = _submit(site, nodes=4)
    job, ran = _finished(site, job_id)
    log = site["log"].read_text()
    assert job["restart_cnt"] >= 1 and outlier not in ran and len(ran) == 4, (ran, log)
    assert "never fully probed): full probe" in log, log
    assert f"drained {outlier}: screener: rd " in log, log
    assert "DRAIN" in sinfo_nodes(cluster)[outlier]["state_flags"]
    assert all("DRAIN" not in sinfo_nodes(cluster)[n]["state_flags"] for n in shared)
    assert _actions(site, outlier) == ["drain", "drain_pending"]
    # first attempt: all 4 read slower than they write, the outlier drained; requeued: 3 of
    # 4, nobody drained. Writes run at the pace everywhere: the reads are slow together,
    # which the write/read ratios of the round show (issue 44: judged against each other)
    crowd = r"nodes read over 5x slower than they write \(the round's median write/read [\d.]+x\)"
    why = f"{crowd}: shared cause, not blamed on any one node"
    for k in (4, 3):
        assert re.search(rf"{k}/4 {why}: node\[02-04\] not blamed, not drained", log), log
    with open_store(site["db"]) as store:
        ours = [
            r for r in store.latest_runs(10) if r.job_id == job_id and r.trigger.value == "prolog"
        ]
        runs = sorted(ours, key=lambda r: r.id)
        assert [r.shared_cause for r in runs] == [True, True], runs
        guards = [views.run_detail(store, r.id).guard_reason for r in runs]
        assert len(guards) == 2, guards
        for k, guard in zip((4, 3), guards, strict=True):
            assert re.fullmatch(f"{k}/4 {why}", guard or ""), guards
        for n in shared:  # one guard_trip per run: the shared-cause alert
            trips = [e for e in store.node_events(n) if e.action == "guard_trip"]
            assert sorted(e.run_id for e in trips) == [r.id for r in runs], (n, trips)


def test_day_one_burst_drains_the_slow_reader_judged_beside_the_others(
    site: dict[str, Any],
) -> None:
    """Issue 44, "day one": a new store (no sweep), a 1-node screened job on every node at
    once, one node reading at 1/25. Nobody has a usual level; the burst's figures are each
    other's yardstick, so the reader is drained and its job requeued (it was "only 0 other
    partition nodes judged", nobody drained)."""
    cluster = site["cluster"]
    write_config(
        site["config"], cluster, site["db"], site["log"],
        slurm={"partition_max_drain_fraction": 0.2, "max_drain_fraction": 0.34},
        probe={"seq_iodepth": 8},  # the reader drains 8 queued MiB per read job, not 32
    )  # fmt: skip
    slow = cluster.nodes[0]
    cluster.inject(slow, "slow_read", "12M")  # 1/25 of the 300 MB/s pace
    # one job per node (select/linear), none pinned: the requeued one runs on a freed node
    jobs = [_submit(site, nodes=1) for _ in cluster.nodes]
    finished = [_finished(site, j) for j in jobs]
    log = site["log"].read_text()
    assert sorted(job["restart_cnt"] >= 1 for job, _ in finished) == [False] * 4 + [True], log
    assert all(slow not in ran for _, ran in finished), log
    others = NODES - 1
    assert re.search(
        rf"fleet: {others} other partition nodes judged \(read\) within 900s against each "
        rf"other's recent figures \(no usual level yet\); {slow} read 0\.0\dx their median "
        rf"\(< 0\.25\): 1 of {NODES} read slow \({slow}\), {others} healthy: not a shared cause",
        log,
    ), log
    assert f"drained {slow}: screener: rd " in log, log
    flags = sinfo_nodes(cluster)
    assert [n for n in cluster.nodes if "DRAIN" in flags[n]["state_flags"]] == [slow], log


def test_devices_run_at_the_pace_and_heal_returns_to_it(site: dict[str, Any]) -> None:
    """Hooked clusters start paced (up --pace 300M --pace-iops 20000): healthy nodes read
    alike and probes spare the shared cores; a slow_read overrides the pace, heal restores
    it (not unthrottled, which would make the healed node 10x faster than its peers)."""
    cluster = site["cluster"]
    node = cluster.nodes[-1]
    fio_job(cluster, node, "write", runtime=0.5)
    paced = fio_job(cluster, node, "read", runtime=1)["read"]["bw_bytes"] / 1e6
    assert 150 < paced < 450, f"paced read {paced:.0f} MB/s"
    iops = fio_job(cluster, node, "randread", bs="4k", runtime=1)["read"]["iops"]
    assert iops < PACE_IOPS * 1.5, f"paced randread {iops:.0f} IOPS"
    cluster.inject(node, "slow_read", SLOW)
    slow = fio_job(cluster, node, "read", runtime=1)["read"]["bw_bytes"] / 1e6
    assert slow < 40, f"slow_read {SLOW}: read {slow:.0f} MB/s"
    assert cluster.heal(node) == {node: ["slow_read"]}
    healed = fio_job(cluster, node, "read", runtime=1)["read"]["bw_bytes"] / 1e6
    assert 150 < healed < 450, f"healed read {healed:.0f} MB/s: back to the pace"
