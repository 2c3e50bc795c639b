"""Small jobs are protected too (issue 27), on the emulated cluster: real slurmctld runs
jobs/prolog-slurmctld for 1- and 2-node jobs and for bursts of them; slow reads are blkio
throttles. Every device is paced to one rate first (tests/hooked_cluster.PACE) so that the
2 shared cores do not decide who looks slow.

Each test starts from a fresh DB holding one screen of the whole partition (the fleet's
usual level), as a site has after its sweeps.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle
from screener.store import open_store
from tests.hooked_cluster import (
    module_cluster,
    pace_devices,
    run_screener,
    sbatch,
    sinfo_nodes,
    site_info,
    wait_job,
    write_config,
)

pytestmark = pytest.mark.cluster

NODES = 8
SLOW = "12M"  # ~1/25 of PACE (300M), issue 27's slow reader
SHARED = "50M"  # every node 6x slower at once: a shared cause


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    yield from module_cluster(tmp_path_factory, "small", NODES)


@pytest.fixture()
def site(hooked: tuple[ClusterHandle, Path], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A fresh DB with one healthy screen of every node; every prolog probes (fresh_s 0)."""
    cluster, d = hooked
    info = site_info(
        cluster,
        d,
        tmp_path,
        prolog={"fresh_s": 0},
        slurm={"partition_max_drain_fraction": 0.2, "max_drain_fraction": 0.34},
    )
    pace_devices(cluster, list(cluster.nodes))
    base = run_screener(cluster, info["config"], "screen", ",".join(cluster.nodes))
    assert base.returncode == 0, base.stdout + base.stderr
    yield info
    cluster.reset()


def _submit(site: dict[str, Any], nodes: int = 1) -> str:
    out = site["out"] / "hosts-%j.txt"
    return sbatch(
        site["cluster"], "-N", str(nodes), "-o", str(out), "--comment", "screener=on",
        "--wrap", "srun hostname",
    )  # fmt: skip


def _finished(site: dict[str, Any], job_id: str) -> tuple[dict[str, Any], set[str]]:
    job = wait_job(site["cluster"], job_id, timeout=300)
    assert job["job_state"] == "COMPLETED", site["log"].read_text()
    return job, set((site["out"] / f"hosts-{job_id}.txt").read_text().split())


def _drained(cluster: ClusterHandle) -> set[str]:
    return {n for n, rec in sinfo_nodes(cluster).items() if "DRAIN" in rec["state_flags"]}


def _events(site: dict[str, Any], action: str) -> set[str]:
    with open_store(site["db"]) as store:
        return {e.node for e in store.node_events() if e.action == action}


# 1 node with triage on (the default), 2 with it off; the third pairing repeated a 30 s
# scenario that neither axis changes (both skip the triage under min_peers)
@pytest.mark.parametrize(("size", "triage"), [(2, False), (1, True)])
def test_a_small_job_on_a_slow_node_is_requeued_onto_healthy_nodes(
    site: dict[str, Any], size: int, triage: bool
) -> None:
    """With [prolog] triage on (the default since 2026-11-26, issue 22) a 1-node job is too
    small for a short probe judged beside peers: it gets the full probe, and the slow node is
    still drained; with triage off, the same without a word about it."""
    cluster = site["cluster"]
    write_config(
        site["config"], cluster, site["db"], site["log"],
        prolog={"fresh_s": 0, "triage": triage},
        slurm={"partition_max_drain_fraction": 0.2, "max_drain_fraction": 0.34},
    )  # fmt: skip
    slow = cluster.nodes[0]  # select/linear hands out the lowest idle nodes first
    cluster.inject(slow, "slow_read", SLOW)
    job, ran = _finished(site, _submit(site, size))
    log = site["log"].read_text()
    skipped = f"triage skipped ({size} nodes < verdict.min_peers"
    assert (skipped in log) == triage and ("triage of" in log) is False, log
    assert job["restart_cnt"] >= 1 and slow not in ran and len(ran) == size, (ran, log)
    assert f"drained {slow}: screener: rd " in log, log
    # the fleet decided, and said so: the allocation fraction (1 of 1, 1 of 2) did not
    fleet = [ln for ln in log.splitlines() if "fleet: " in ln]  # the whole log is too long
    assert f"fleet: 1 of {NODES} partition nodes probed within 900s read slow ({slow})" in log, (
        fleet or log
    )
    assert "allocated nodes slow" not in log, log
    assert _drained(cluster) == {slow}


def test_a_burst_of_one_node_jobs_drains_exactly_the_slow_node(site: dict[str, Any]) -> None:
    cluster = site["cluster"]
    slow = cluster.nodes[2]
    cluster.inject(slow, "slow_read", SLOW)
    jobs = [_submit(site) for _ in range(NODES)]
    ran = [_finished(site, j)[1] for j in jobs]
    log = site["log"].read_text()
    assert all(len(r) == 1 and slow not in r for r in ran), (ran, log)
    assert _drained(cluster) == {slow}, log
    assert _events(site, "drain") == {slow} and _events(site, "guard_trip") == set(), log


def test_a_burst_under_a_shared_cause_drains_nobody(site: dict[str, Any]) -> None:
    cluster = site["cluster"]
    for n in cluster.nodes:
        cluster.inject(n, "slow_read", SHARED)
    jobs = [_submit(site) for _ in range(NODES)]
    ran = [_finished(site, j)[1] for j in jobs]
    log = site["log"].read_text()
    assert all(len(r) == 1 for r in ran) and len(set().union(*ran)) == NODES, (ran, log)
    assert _drained(cluster) == set(), log
    assert _events(site, "drain") == set(), log
    tripped = _events(site, "guard_trip")
    assert tripped, log  # every node judged slow was held back, on record
    assert "shared cause suspected, nobody drained" in log, log
    with open_store(site["db"]) as store:
        guards = [r for r in store.latest_runs(20) if r.trigger.value == "prolog"]
        assert guards and all(r.job_id for r in guards)


def test_nodes_with_slurm_shows_every_node_and_who_drained_it(
    hooked: tuple[ClusterHandle, Path], tmp_path: Path
) -> None:
    """`screener nodes --slurm` (issue 26): Slurm's whole view beside screener's. Only half
    the partition was ever screened; an admin drained one node for an RMA."""
    cluster, d = hooked
    config, db = d / "screener.toml", f"sqlite:///{tmp_path}/screener.db"
    write_config(config, cluster, db, tmp_path / "prolog.log")
    screened, never, rma = cluster.nodes[:4], cluster.nodes[5], cluster.nodes[7]
    base = run_screener(cluster, config, "screen", ",".join(screened))
    assert base.returncode == 0, base.stdout + base.stderr
    cluster.slurm("scontrol", "update", f"nodename={rma}", "state=drain", "reason=RMA ticket 123")
    try:
        got = run_screener(cluster, config, "nodes", "--slurm", "--json")
        assert got.returncode == 0, got.stderr
        rows = {r["node"]: r for r in json.loads(got.stdout)}
        assert sorted(rows) == sorted(cluster.nodes)  # every node Slurm lists
        assert all(rows[n]["status"] == "OK" and rows[n]["note"] == "" for n in screened)
        assert rows[never]["note"] == "never probed" and rows[never]["status"] is None
        assert rows[rma]["note"] == "never probed, drained by someone else"
        assert rows[rma]["slurm_reason"] == "RMA ticket 123"
        assert "DRAIN" in rows[rma]["slurm_state"]
        table = run_screener(cluster, config, "nodes", "--slurm", extra_env={"COLUMNS": "80"})
        out = table.stdout
        assert table.returncode == 0 and all(len(ln) <= 80 for ln in out.splitlines()), out
        assert "by someone else" in out and "RMA ticket 123" in out, out  # may fold
        assert never in out and "never probed" in out, out
    finally:
        cluster.reset()
