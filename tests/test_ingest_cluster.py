"""On the emulated cluster with real Slurm: an IOR-shaped `srun fio` job (one task per node,
write then read of a node-local file). The prolog's verdicts are stood in for by
`screener screen --trigger prolog --job-id` on the held job's nodes, and ingest is run by
hand with an explicit layout (tests/test_ingest_hooked.py does the same with the real
PrologSlurmctld/EpilogSlurmctld hooks); then one node is slowed *after* it passed, the
job runs, and `screener ingest` + `screener accuracy` must find that node and only it."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests import cli_fork
from tests.hooked_cluster import pace_devices

FIO_MIB = 256  # per node: ~0.1 s healthy (64 MiB was ~25 ms: scheduler noise on a loaded
# host then moved one healthy node to 0.47x); the 20 MB/s throttled node reads ~13 s


def screener(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return cli_fork.run(args, timeout=300, env={**os.environ, **env})


def job_script(tmp_path: Path, scratch: str) -> Path:
    """The batch script: one fio per node, a write job then a read job of the same file."""
    fio = [
        "fio",
        "--output-format=json",
        "--direct=1",  # the device, not the page cache
        "--ioengine=psync",
        "--bs=1M",
        f"--size={FIO_MIB}M",
        f"--filename={scratch}/ingest-test.bin",  # node-local: each node has its own /scratch
        "--name=write",
        "--rw=write",
        "--name=read",
        "--rw=read",
        "--stonewall",  # read after the write finished: read what was written
        "--unlink=1",
    ]
    srun = [
        "srun",
        "--distribution=block",
        "--ntasks-per-node=1",
        f"--output={tmp_path}/fio.%j.%t.json",  # one fio document per task (= rank)
    ]
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/sh\nexec " + " ".join(srun + fio) + "\n")
    path.chmod(0o755)
    return path


def wait_done(cluster: Any, job: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        show = cluster.slurm("scontrol", "show", "job", job, "-o").stdout
        m = re.search(r"JobState=(\S+)", show)
        state = m.group(1) if m else ""
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state
        time.sleep(0.2)  # polling the job's real state, bounded by the deadline
    return state


def run_screened_job(
    cluster: Any,
    tmp_path: Path,
    nodes: list[str],
    env: dict[str, str],
    cfg: Path,
    slow: str | None,
) -> str:
    """Submit held, screen as the prolog would, slow `slow` down, release, wait."""
    nodelist = ",".join(nodes)
    job = (
        cluster.slurm(
            "sbatch",
            "--parsable",
            "--hold",
            "-N",
            str(len(nodes)),
            "-w",
            nodelist,
            "--ntasks-per-node=1",
            f"--output={tmp_path}/job.%j.out",
            str(job_script(tmp_path, cluster.scratch)),
        )
        .stdout.strip()
        .split(";")[0]
    )
    screen = screener(
        "--config",
        str(cfg),
        "screen",
        nodelist,
        "--trigger",
        "prolog",
        "--job-id",
        job,
        "--json",
        env=env,
    )
    assert screen.returncode == 0, screen.stderr
    # every node passed screening OK (a DEGRADED one would be "unscreened" to accuracy)
    judged = {n["node"]: n["status"] for n in json.loads(screen.stdout)["nodes"]}
    assert judged == dict.fromkeys(nodes, "OK"), judged
    if slow is not None:
        cluster.inject(slow, "slow_read", "20M")  # after the prolog passed it
    cluster.slurm("scontrol", "release", job)
    assert wait_done(cluster, job) == "COMPLETED", (tmp_path / f"job.{job}.out").read_text()
    return job


@pytest.mark.cluster
def test_node_slowed_after_screening_is_an_in_job_episode_and_a_miss(
    cluster: Any, tmp_path: Path
) -> None:
    if len(cluster.nodes) < 4:
        pytest.skip("needs 4 nodes")
    nodes = cluster.nodes[:4]
    slow = nodes[2]
    db = tmp_path / "s.db"
    env = {"SCREENER_DATABASE_URL": f"sqlite:///{db}"}
    cfg = tmp_path / "screener.toml"
    cfg.write_text(
        f'[probe]\nsize_mib = 32\nruntime_s = 1.0\nramp_s = 0.5\ntarget = "{cluster.scratch}"\n'
        f'[transport]\nssh_config = "{cluster.ssh_config}"\nknown_hosts = "{cluster.known_hosts}"\n'
        # a stall mode or close call from a CPU hiccup of the 2 shared cores can make a
        # healthy node DEGRADED before the job (CI, 2026-11-27): not this test's subject
        '[verdict]\nshadow = ["stalls", "close_call"]\n'
    )
    layout = ["--nodes", ",".join(nodes), "--ranks-per-node", "1", "--partition", "debug"]
    try:
        _jobs_and_accuracy(cluster, tmp_path, nodes, slow, env, cfg, layout, db)
    finally:
        cluster.heal()


def _jobs_and_accuracy(
    cluster: Any,
    tmp_path: Path,
    nodes: list[str],
    slow: str,
    env: dict[str, str],
    cfg: Path,
    layout: list[str],
    db: Path,
) -> None:
    pace_devices(cluster, nodes)
    bad = run_screened_job(cluster, tmp_path, nodes, env, cfg, slow)
    pace_devices(cluster, [slow])  # healed: back to its peers' pace
    out = screener("ingest", bad, "--dir", str(tmp_path), *layout, "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    reads = {r["node"]: r for r in doc["records"] if r["node"] and r["phase"] == "read"}
    print({n: round(r["throughput_bytes_s"] / 1e6, 1) for n, r in reads.items()})  # -s: figures
    assert [n for n, r in reads.items() if r["outlier"]] == [slow]
    assert reads[slow]["throughput_bytes_s"] < 25e6  # the 20 MB/s throttle
    writes = [r for r in doc["records"] if r["node"] and r["phase"] == "write"]
    assert len(writes) == 4 and not any(r["outlier"] for r in writes)  # write stayed fast

    good = run_screened_job(cluster, tmp_path, nodes, env, cfg, None)
    files = [str(tmp_path / f"fio.{good}.{t}.json") for t in range(4)]
    out = screener("ingest", good, *files, *layout, "--json", env=env)
    assert out.returncode == 0, out.stderr
    healthy = json.loads(out.stdout)
    print(
        {
            r["node"]: round(r["throughput_bytes_s"] / 1e6, 1)
            for r in healthy["records"]
            if r["node"] and r["phase"] == "read"
        }
    )
    assert healthy["in_job_slow"] == []

    with sqlite3.connect(db) as con:
        eps = con.execute(
            "select n.name, e.job_id from episodes e join nodes n on n.id = e.node_id"
            " where e.\"trigger\" = 'job'"
        ).fetchall()
    assert eps == [(slow, bad)]

    acc = screener("accuracy", "--since", "1d", "--by", "job", "--json", env=env)
    assert acc.returncode == 0, acc.stderr
    rows = {r["group"]: r for r in json.loads(acc.stdout)["rows"]}
    assert rows[bad]["misses"] == 1 and rows[bad]["missed_nodes"] == slow
    assert rows[bad]["stayed_ok"] == 3 and rows[bad]["screened_jobs"] == 1
    assert rows[good]["misses"] == 0 and rows[good]["stayed_ok"] == 4
