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
