"""Made-up figures through the real EpilogSlurmctld (issue 41, item 5): a job copies a
per-rank CSV claiming node02 read at 20 MB/s (the real throttled IOR run,
tests/data/ior/cluster/throttled) into the directory its comment names, and does no I/O.
On a shared allocation (`--oversubscribe` on an OverSubscribe=YES partition) the epilog
stores the figures, says they are not trusted, opens no episode and drains nothing; the
same file from an `--exclusive` job opens the episode and drains node02, as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle
from tests.hooked_cluster import module_cluster, sbatch, sinfo_nodes, site_info, wait_for, wait_job

pytestmark = pytest.mark.cluster

MADE_UP = Path(__file__).resolve().parent / "data" / "ior" / "cluster" / "throttled"
NODES = 4
SLOW = "node02"  # rank 1 in the CSV: the second node of a block layout, 1 per node


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    yield from module_cluster(tmp_path_factory, "trust", NODES)


@pytest.fixture()
def site(hooked: tuple[ClusterHandle, Path], tmp_path: Path) -> Iterator[dict[str, Any]]:
    cluster, d = hooked
    yield site_info(cluster, d, tmp_path, ingest={"drain": True})
    cluster.reset()


def _query(db: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    path = Path(db.removeprefix("sqlite:///"))
    if not path.exists():
        return []
    with sqlite3.connect(path) as con:
        return con.execute(sql, args).fetchall()


def _made_up_job(site: dict[str, Any], *sharing: str) -> str:
    """An unscreened job naming its directory whose only work is copying the made-up CSV
    there under its own job id; its id once the epilog has stored the ingest."""
    cluster, out = site["cluster"], site["out"]
    nodes = cluster.nodes[:NODES]
    job = sbatch(
        cluster,
        "-N",
        str(NODES),
        "-w",
        ",".join(nodes),
        "--ntasks-per-node=1",
        *sharing,
        "--comment",
        f"screener_out={out}",
        "-o",
        str(out / "job.%j.out"),
        "--wrap",
        f'cp {MADE_UP / "ior-2.ranks.csv"} "{out}/ior-$SLURM_JOB_ID.ranks.csv"',
    )
    assert wait_job(cluster, job)["job_state"] == "COMPLETED"
    wait_for(
        "the epilog's ingest",
        lambda: _query(site["db"], "select id from job_ingests where job_id = ?", job),
    )
    return job


def _episodes(db: str, job: str) -> list[tuple[Any, ...]]:
    """The nodes with an in-job episode of ``job`` (the ingest's; a drain opens its own)."""
    return _query(
        db,
        "select distinct n.name from episodes e join nodes n on n.id = e.node_id"
        " where e.\"trigger\" = 'job' and e.job_id = ?",
        job,
    )


def _outliers(db: str, job: str) -> list[tuple[Any, ...]]:
    return _query(
        db,
        "select distinct n.name from job_results r join nodes n on n.id = r.node_id"
        " where r.job_id = ? and r.phase = 'read' and r.outlier",
        job,
    )


def _drained(cluster: ClusterHandle, name: str) -> dict[str, Any] | None:
    node = sinfo_nodes(cluster)[name]
    return node if "DRAIN" in node["state_flags"] else None


def test_made_up_figures_act_only_for_an_exclusive_job(site: dict[str, Any]) -> None:
    cluster, db, log = site["cluster"], site["db"], site["log"]
    cluster.slurm("scontrol", "update", "PartitionName=debug", "OverSubscribe=YES")
    try:
        shared = _made_up_job(site, "--oversubscribe")
    finally:
        cluster.slurm("scontrol", "update", "PartitionName=debug", "OverSubscribe=NO")
    record = cluster.slurm("scontrol", "show", "job", shared).stdout
    assert "OverSubscribe=YES" in record  # the set-up really was a shared allocation
    assert _outliers(db, shared) == [(SLOW,)]  # the figures are recorded as given
    assert _episodes(db, shared) == []
    line = (
        f"job {shared}: ingested figures not trusted for node state (shared allocation,"
        f" no in-job iostat confirmation): recorded only; in-job slow {SLOW}: no episode,"
        " no drain"
    )
    wait_for("the untrusted line", lambda: line in log.read_text())  # the epilog's last
    assert f"in-job slow: {SLOW} (recorded only)" in log.read_text()
    notes = _query(db, "select notes from job_ingests where job_id = ?", shared)[0][0]
    assert "figures not trusted for node state (shared allocation" in notes
    assert all("DRAIN" not in n["state_flags"] for n in sinfo_nodes(cluster).values())

    exclusive = _made_up_job(site, "--exclusive")
    assert "OverSubscribe=NO" in cluster.slurm("scontrol", "show", "job", exclusive).stdout
    assert _outliers(db, exclusive) == [(SLOW,)]
    assert _episodes(db, exclusive) == [(SLOW,)]
    node = wait_for("the in-job drain", lambda: _drained(cluster, SLOW))
    assert node["reason"] == f"screener-job: rd <0.01x job {exclusive}", node
    assert f"job {exclusive}: ingested figures not trusted" not in log.read_text()
