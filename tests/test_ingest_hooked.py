"""After the job, with the real hooks: slurmctld runs screener's PrologSlurmctld (screens the
job's nodes) and EpilogSlurmctld (ingests the job's fio outputs from the directory its
comment names, with the rank layout from `scontrol show job`). One node is slowed after
the prolog passed it: the epilog's ingest finds it, drains it with the in-job tag
([ingest] drain = true), `screener resume` may undo that drain, and `screener accuracy`
counts one miss; a job on healthy nodes records none; a job shorter than one in-job
iostat interval gets a log line that says so; and jobs/ior.sbatch with real IOR goes through
both hooks (its short phases are not judged, and the epilog says so)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle
from screener.hostlist import fold_nodes
from screener.store import open_store
from tests.hooked_cluster import (
    hooked_cluster,
    pace_devices,
    run_screener,
    sbatch,
    sinfo_nodes,
    wait_for,
    wait_job,
    write_config,
)
from tests.ior_job import missing_ior, submit_ior, wait_ior

pytestmark = pytest.mark.cluster

SLOW = "20M"
FIO_MIB = 256  # per node: ~0.1 s healthy, ~13 s at 20 MB/s (tests/test_ingest_cluster.py)


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    d = tmp_path_factory.mktemp("hooked-ingest")
    config = d / "screener.toml"
    config.write_text("")
    for handle in hooked_cluster(d, config, nodes=5, hookd="own"):
        yield handle, d


@pytest.fixture()
def site(hooked: tuple[ClusterHandle, Path], tmp_path: Path) -> Iterator[dict[str, Any]]:
    cluster, d = hooked
    info = {
        "cluster": cluster,
        "config": d / "screener.toml",
        "db": tmp_path / "screener.db",
        "log": tmp_path / "hooks.log",
        "out": tmp_path,
    }
    write_config(
        info["config"],
        cluster,
        f"sqlite:///{info['db']}",
        info["log"],
        prolog={"fresh_s": 0.0},  # probe every node every time: each job has verdicts for all
        ingest={"drain": True},
        # A lone 4k stall mode is what a CPU hiccup of this 2-core host makes on a healthy
        # node (CI: node02 DEGRADED "~1 stall in 1.5 s"); the stall rule has its own tests,
        # and these assert the prolog passed every node: recorded, it does not decide here.
        verdict={"shadow": ["stalls"]},
    )
    pace_devices(cluster, cluster.nodes[:4])
    yield info
    cluster.reset()


def _script(out: Path, scratch: str, set_comment: bool) -> Path:
    """Signal that the job started (the prolog has passed its nodes), wait for the test's
    go, then one fio per node: write, then read back, a node-local file. ``set_comment``:
    name the output directory from inside the job, as jobs/ior.sbatch does."""
    comment = (
        'scontrol update JobId="$SLURM_JOB_ID" Comment="screener=on screener_out=$d"\n'
        if set_comment
        else ""
    )
    fio = (
        f"fio --output-format=json --direct=1 --ioengine=psync --bs=1M --size={FIO_MIB}M"
        f" --filename={scratch}/ingest-hooked.bin --name=write --rw=write"
        " --name=read --rw=read --stonewall --unlink=1"
    )
    path = out / "job.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'd="{out}"\n'
        f"{comment}"
        'touch "$d/started.$SLURM_JOB_ID"\n'
        "n=0\n"
        'while [ ! -e "$d/go.$SLURM_JOB_ID" ] && [ "$n" -lt 1500 ]; do\n'
        "  sleep 0.2; n=$((n + 1))\n"
        "done\n"
        f'exec srun --distribution=block --output="$d/fio.%j.%t.json" {fio}\n'
    )
    path.chmod(0o755)
    return path


def _query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return con.execute(sql, args).fetchall()


def _run_job(site: dict[str, Any], nodes: list[str], slow: str | None) -> str:
    """The slowed job names its output directory at submission, the healthy one from
    inside the job (``scontrol update ... Comment=``): the epilog must see either."""
    cluster, out = site["cluster"], site["out"]
    at_submit = slow is not None
    job = sbatch(
        cluster,
        "-N",
        str(len(nodes)),
        "-w",
        ",".join(nodes),
        "--ntasks-per-node=1",
        "--comment",
        f"screener=on screener_out={out}" if at_submit else "screener=on",
        "-o",
        str(out / "job.%j.out"),
        str(_script(out, cluster.scratch, set_comment=not at_submit)),
    )
    wait_for("the job to start", lambda: (out / f"started.{job}").exists())
    if slow is not None:
        cluster.inject(slow, "slow_read", SLOW)  # after the prolog passed it
    (out / f"go.{job}").touch()
    state = wait_job(cluster, job)
    assert state["job_state"] == "COMPLETED", site["log"].read_text()
    wait_for(
        "the epilog's ingest",
        lambda: _query(site["db"], "select id from job_ingests where job_id = ?", job),
    )
    return job


def _prolog_verdicts(db: Path, job: str) -> dict[str, str]:
    rows = _query(
        db,
        "select n.name, v.status from verdicts v join runs r on r.id = v.run_id"
        " join nodes n on n.id = v.node_id where r.\"trigger\" = 'prolog' and r.job_id = ?",
        job,
    )
    return dict(rows)


def test_node_slowed_after_the_real_prolog_is_ingested_drained_and_a_miss(
    site: dict[str, Any],
) -> None:
    cluster = site["cluster"]
    nodes = cluster.nodes[:4]
    slow = nodes[2]
    db, config = site["db"], site["config"]

    bad = _run_job(site, nodes, slow)
    log = site["log"].read_text()
    assert _prolog_verdicts(db, bad) == dict.fromkeys(nodes, "OK"), log
    assert f"job {bad}: ingested (comment names screener_out={site['out']})" in log
    layout = _query(db, "select layout from job_ingests where job_id = ?", bad)[0][0]
    assert f"from Slurm's record of job {bad}" in layout and "1 per node over 4" in layout
    reads = _query(
        db,
        "select n.name, r.outlier from job_results r join nodes n on n.id = r.node_id"
        " where r.job_id = ? and r.phase = 'read'",
        bad,
    )
    assert sorted(n for n, outlier in reads if outlier) == [slow], reads
    in_job = _query(
        db,
        "select distinct n.name from episodes e join nodes n on n.id = e.node_id"
        " where e.\"trigger\" = 'job' and e.job_id = ?",
        bad,
    )
    assert in_job == [(slow,)]

    node = sinfo_nodes(cluster)[slow]
    reason = node["reason"]
    assert "DRAIN" in node["state_flags"] and reason.startswith("screener-job: rd "), node
    assert reason.endswith(f"job {bad}"), reason
    assert all("DRAIN" not in sinfo_nodes(cluster)[n]["state_flags"] for n in nodes if n != slow)
    with open_store(f"sqlite:///{db}") as store:
        events = store.node_events(slow)
        # two-phase: the intent before scontrol, the drain after, both with the exact reason
        assert [(e.action, e.slurm_reason) for e in events] == [
            ("drain", reason),
            ("drain_pending", reason),
        ]

    pace_devices(cluster, [slow])  # healed: back to its peers' pace
    resumed = run_screener(cluster, config, "resume", slow)
    assert resumed.returncode == 0, resumed.stderr  # the sweep's/admin's resume rule holds
    assert "DRAIN" not in sinfo_nodes(cluster)[slow]["state_flags"]

    good = _run_job(site, nodes, None)
    assert _prolog_verdicts(db, good) == dict.fromkeys(nodes, "OK")
    assert not _query(db, "select 1 from job_results where job_id = ? and outlier", good)
    assert f"job {good}: ingested" in site["log"].read_text()

    acc = run_screener(cluster, config, "accuracy", "--since", "1d", "--by", "job", "--json")
    assert acc.returncode == 0, acc.stderr
    rows = {r["group"]: r for r in json.loads(acc.stdout)["rows"]}
    assert rows[bad]["misses"] == 1 and rows[bad]["missed_nodes"] == slow
    assert rows[bad]["stayed_ok"] == 3 and rows[bad]["screened_jobs"] == 1
    assert rows[good]["misses"] == 0 and rows[good]["stayed_ok"] == 4

    # Slurm's record is the layout source only while the controller knows the job
    files = [str(site["out"] / f"fio.{good}.{t}.json") for t in range(4)]
    again = run_screener(cluster, config, "ingest", good, *files, "--no-store", "--json")
    assert again.returncode == 0, again.stderr
    assert f"from Slurm's record of job {good}" in json.loads(again.stdout)["layout"]
    gone = run_screener(cluster, config, "ingest", "999999", *files, "--no-store")
    assert gone.returncode == 1
    assert gone.stderr.strip().splitlines() == [
        "screener: error: Slurm no longer knows job 999999 (it forgets finished jobs after "
        "MinJobAge), so its task layout is unknown: give --nodes NODESET --ranks-per-node N"
    ]


def test_in_job_drain_is_held_by_the_mass_drain_guard(site: dict[str, Any]) -> None:
    """The same slowed job, with the guard set so that one slow node of four is too many:
    nobody is drained, the node gets a guard_trip event, the in-job episode is kept."""
    cluster = site["cluster"]
    write_config(
        site["config"],
        cluster,
        f"sqlite:///{site['db']}",
        site["log"],
        prolog={"fresh_s": 0.0},
        ingest={"drain": True},
        slurm={"max_drain_fraction": 0.2},  # 1 of 4 allocated nodes = 0.25: over it
    )
    nodes = cluster.nodes[:4]
    slow = nodes[1]
    job = _run_job(site, nodes, slow)
    log = site["log"].read_text()
    assert "guard: 1 of 4 allocated nodes slow (> 0.2)" in log, log
    assert all("DRAIN" not in sinfo_nodes(cluster)[n]["state_flags"] for n in nodes)
    with open_store(f"sqlite:///{site['db']}") as store:
        assert [e.action for e in store.node_events(slow)] == ["guard_trip"]
    episodes = _query(
        site["db"],
        "select n.name from episodes e join nodes n on n.id = e.node_id"
        " where e.\"trigger\" = 'job' and e.job_id = ? and e.reason like 'in-job read%'",
        job,
    )
    assert episodes == [(slow,)]


def test_epilog_says_iostat_ran_when_the_job_was_shorter_than_an_interval(
    site: dict[str, Any],
) -> None:
    """A screened job that ends before in-job iostat's first interval: the real epilog says
    iostat ran and why there is no sample (it used to say "not started")."""
    cluster = site["cluster"]
    write_config(
        site["config"],
        cluster,
        f"sqlite:///{site['db']}",
        site["log"],
        prolog={"fresh_s": 0.0, "iostat_interval_s": 60},
    )
    nodes = cluster.nodes[:3]
    job = sbatch(
        cluster,
        "-N",
        "3",
        "-w",
        ",".join(nodes),
        "--comment",
        "screener=on",
        "-o",
        str(site["out"] / "short.%j.out"),
        "--wrap",
        "true",
    )
    assert wait_job(cluster, job)["job_state"] == "COMPLETED", site["log"].read_text()
    want = (
        f"job {job}: iostat ran on {fold_nodes(nodes)}; job shorter than one 60-s interval:"
        " no sample"
    )
    wait_for("the epilog's line", lambda: want in site["log"].read_text())
    assert "(not started)" not in site["log"].read_text()


def test_real_ior_job_through_the_real_hooks(site: dict[str, Any]) -> None:
    """jobs/ior.sbatch with real IOR (`make ior`): the prolog screens the nodes, the script
    names its output directory in its comment, and the epilog ingests IOR's CSV with the
    layout from Slurm; 16 MiB per rank reads in a few ms: too short to judge, no episode,
    and the epilog's line says so."""
    why = missing_ior()
    if why is not None:
        pytest.skip(why)
    cluster, out = site["cluster"], site["out"]
    nodes = cluster.nodes[:4]
    job = submit_ior(cluster, out, nodes, "16m", 2)
    wait_ior(cluster, job, out)
    wait_for(
        "the epilog's ingest",
        lambda: _query(site["db"], "select id from job_ingests where job_id = ?", job),
    )
    log = site["log"].read_text()
    assert _prolog_verdicts(site["db"], job) == dict.fromkeys(nodes, "OK"), log
    line = next(ln for ln in log.splitlines() if f"job {job}: ingested" in ln)
    assert f"(comment names screener_out={out})" in line
    assert "in-job slow: none; read too short to judge in iteration(s)" in line, line
    episodes = _query(
        site["db"], "select 1 from episodes where \"trigger\" = 'job' and job_id = ?", job
    )
    assert episodes == []
