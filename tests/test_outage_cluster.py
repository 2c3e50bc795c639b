"""Issue 45 on real Slurm, sshd and fio with a private PostgreSQL stopped: the prolog still
drains a confirmed slow node (the guard counting screener's drains from Slurm) and the job
completes on healthy nodes; a second offence is drained too, within the partition guard.
Once PostgreSQL is back, the next screened job's hook replays the spool: every run and
drain appears once, with no command typed, and the drains are screener's to resume."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from deploy.minicluster import ClusterHandle
from screener.store import open_store
from screener.store.slurm_records import SlurmRecords
from tests.hooked_cluster import (
    module_cluster,
    pace_devices,
    run_screener,
    sbatch,
    sinfo_nodes,
    wait_for,
    wait_job,
    write_config,
)
from tests.pg_private import PgCluster, private_cluster

pytestmark = pytest.mark.cluster

SLOW = "20M"  # bytes/s: a 1/15 reader beside the hooked cluster's 300M


@pytest.fixture(scope="module")
def site(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ClusterHandle, Path, PgCluster]]:
    with private_cluster("outage") as pg:
        for handle, d in module_cluster(tmp_path_factory, "outage", 6):
            yield handle, d, pg


def _job(cluster: ClusterHandle, out: Path) -> str:
    return sbatch(
        cluster, "-N", "3", "-o", str(out / "hosts-%j.txt"), "--comment", "screener=on",
        "--wrap", "srun hostname",
    )  # fmt: skip


def _ran_on(out: Path, job_id: str) -> set[str]:
    return set((out / f"hosts-{job_id}.txt").read_text().split())


def _runs_tagged(url: str, uid: str) -> int:
    with open_store(url) as store, store.reading("count runs of a tag") as conn:
        sql = text("SELECT count(*) FROM runs WHERE policy->>'run_tag' = :u")
        return int(conn.scalar(sql, {"u": uid}) or 0)


def test_drained_while_the_database_is_down_then_replayed_once(
    site: tuple[ClusterHandle, Path, PgCluster], tmp_path: Path
) -> None:
    cluster, d, pg = site
    config, log_path, spool_dir = d / "screener.toml", tmp_path / "hook.log", d / "spool"
    # 6 nodes, at most 0.4 of them drained: two offences fit (2/6), a third would not
    slurm = {"partition_max_drain_fraction": 0.4, "backend": "cli"}
    write_config(config, cluster, pg.url, log_path, slurm=slurm)
    up = run_screener(cluster, config, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    first, second = cluster.nodes[0], cluster.nodes[1]  # select/linear: lowest idle first
    try:
        pg.stop()
        drained: dict[str, str] = {}
        for slow in (first, second):
            cluster.inject(slow, "slow_read", SLOW)
            job_id = _job(cluster, tmp_path)
            job = wait_job(cluster, job_id)
            log = log_path.read_text()
            assert job["job_state"] == "COMPLETED" and job["restart_cnt"] >= 1, log
            ran = _ran_on(tmp_path, job_id)
            assert len(ran) == 3 and slow not in ran and first not in ran, (ran, log)
            node = sinfo_nodes(cluster)[slow]
            assert "DRAIN" in node["state_flags"], (node, log)
            assert node["reason"].startswith("screener: rd "), node
            drained[slow] = node["reason"]
            assert f"drained {slow}: {node['reason']} (recorded in the spool)" in log, log
        counted = re.findall(r"guard: database unavailable: screener's drains counted from "
                             r"Slurm \((\d) of 6 partition nodes", log)  # fmt: skip
        assert counted == ["0", "1"], log  # the second offence counted the first, from Slurm
        spooled = sorted(spool_dir.glob("run-*.jsonl"))
        uids = [p.name[len("run-") : -len(".jsonl")] for p in spooled]
        assert len(uids) >= 4, spooled  # two jobs, each screened, drained, requeued, screened
        kinds = [json.loads(x)["kind"] for p in spooled for x in p.read_text().splitlines()]
        assert kinds.count("drain") == 2 and kinds.count("drain_pending") == 2, kinds

        pg.start()  # no command typed: the next screened job's hook replays the spool
        pace_devices(cluster, [first, second])
        job_id = _job(cluster, tmp_path)
        job = wait_job(cluster, job_id)
        log = log_path.read_text()
        assert job["job_state"] == "COMPLETED" and job["restart_cnt"] == 0, log
        wait_for("the spool to be replayed", lambda: not list(spool_dir.glob("run-*.jsonl")), 60)
        assert [_runs_tagged(pg.url, u) for u in uids] == [1] * len(uids)
        with open_store(pg.url) as store:
            rec = SlurmRecords(store)
            for slow, reason in drained.items():
                actions = [e.action for e in store.node_events(slow)]
                assert actions.count("drain") == 1 and actions.count("drain_pending") == 1
                assert rec.screener_reason(slow) == reason
                (episode,) = rec.episodes(slow)
                assert episode[0] == "prolog" and episode[2] is None
        resumed = run_screener(cluster, config, "resume", f"{first},{second}")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        states = sinfo_nodes(cluster)
        assert not any("DRAIN" in states[n]["state_flags"] for n in (first, second)), states
    finally:
        if not pg.is_up():
            pg.start()
        cluster.reset()


def _fio_job(cluster: ClusterHandle, out: Path, nodes: int) -> str:
    """A job that names its output directory (not screened) and runs one fio per node,
    writing fio's per-task documents where the epilog looks for them (docs/ingest.md)."""
    fio = (
        "fio --output-format=json --direct=1 --ioengine=psync --bs=1M --size=32M"
        f" --filename={cluster.scratch}/outage-ingest.bin --name=write --rw=write"
        " --name=read --rw=read --stonewall --unlink=1"
    )
    script = out / "fio-job.sh"
    script.write_text(
        f"#!/bin/sh\nexec srun --distribution=block --output={out}/fio.%j.%t.json {fio}\n"
    )
    script.chmod(0o755)
    return sbatch(
        cluster, "-N", str(nodes), "--ntasks-per-node=1", "--comment", f"screener_out={out}",
        "-o", str(out / "job.%j.out"), str(script),
    )  # fmt: skip


def _ingests(url: str, job_id: str) -> tuple[int, int]:
    """(job_ingests rows, job_results rows) of ``job_id``."""
    with open_store(url) as store, store.reading("count the job's ingests") as conn:
        heads = conn.scalar(
            text("SELECT count(*) FROM job_ingests WHERE job_id = :j"), {"j": job_id}
        )
        rows = conn.scalar(
            text("SELECT count(*) FROM job_results WHERE job_id = :j"), {"j": job_id}
        )
    return int(heads or 0), int(rows or 0)


def test_an_epilog_ingest_spooled_in_an_outage_appears_once_after(
    site: tuple[ClusterHandle, Path, PgCluster], tmp_path: Path
) -> None:
    """The epilog of a job with outputs ends while PostgreSQL is down: the judged ingest is
    spooled (epilog/ingest.py _spool_ingest). Once the database is back, the next job's
    epilog replays it, with no command typed: the job's ingest is stored once."""
    cluster, d, pg = site
    config, log_path, spool_dir = d / "screener.toml", tmp_path / "hook.log", d / "spool"
    write_config(config, cluster, pg.url, log_path)
    up = run_screener(cluster, config, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    try:
        pg.stop()
        job_id = _fio_job(cluster, tmp_path, 3)
        job = wait_job(cluster, job_id)
        assert job["job_state"] == "COMPLETED", (tmp_path / f"job.{job_id}.out").read_text()
        said = f"job {job_id}: database unavailable ("
        log = wait_for(
            "the epilog to spool", lambda: said in log_path.read_text() and log_path.read_text()
        )
        assert "ingest spooled to" in log and "outputs not ingested" not in log, log
        (spooled,) = spool_dir.glob("ingest-*.json")
        assert json.loads(spooled.read_text())["head"]["job_id"] == job_id

        pg.start()  # no command typed: the next job's epilog replays the spool
        wait_job(cluster, sbatch(cluster, "-N", "1", "--wrap", "true"))
        wait_for("the spool to be replayed", lambda: not list(spool_dir.glob("ingest-*")), 60)
        heads, rows = _ingests(pg.url, job_id)
        assert heads == 1 and rows >= 3, (heads, rows, log_path.read_text())
        assert "spool replayed: 1 stored" in log_path.read_text()
    finally:
        if not pg.is_up():
            pg.start()
        cluster.reset()
