"""The in-job paths are as safe as the prolog's (issue 19, items 9 and 10):

- in-job iostat works in a private 0700 directory it creates itself: a symlink a node user
  planted at its name in the shared /tmp is refused and never written through (over the
  emulated cluster's real sshd; on real Linux fs.protected_symlinks would also stop root
  following another user's link in /tmp, but the hook must not depend on it);
- the epilog says what happened when iostat ran but no interval ended (not "not started");
- the epilog's in-job drain counts the partition guard under the actions lock, so a drain
  another run records while holding the lock is counted (real Slurm, real PostgreSQL, whose
  pg_locks shows when the drain is waiting for the lock).
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from deploy.minicluster import ClusterHandle
from screener.app import make_transport
from screener.epilog.hook import no_samples, run_epilog, stopped
from screener.epilog.ingest import drain_outliers
from screener.hooks.injob import NOT_BEGUN, NodeJobIo, outliers, private_dir, start_argv, stop_argv
from screener.hooks.later import JobLock
from screener.hooks.log import HookLog
from screener.hostlist import fold_nodes
from screener.ingest.files import load_files
from screener.ingest.judge import judge_job
from screener.ingest.layout import block_layout
from screener.ingest.service import Ingested
from screener.policy import IngestPolicy, Policy, TransportPolicy, VerdictPolicy, policy_from_dict
from screener.probe_data import NodeProbe, Trigger
from screener.slurm.client import SlurmJob
from screener.store import open_store
from screener.store.locks import actions_lock
from screener.store.slurm_records import SlurmRecords
from screener.transport.base import CommandResult

pytest_plugins = ["store_fixtures"]  # fixtures: pg_dbs, pg_template

DATA = Path(__file__).resolve().parent / "data"
IOSTAT = DATA / "probe" / "iostat"


# ---- pure: what the stop command's outcome means -------------------------------------------
def test_stop_outcomes_and_the_epilog_line() -> None:
    header = (IOSTAT / "sysstat-12.6.1_no_interval.json").read_text()
    full = (IOSTAT / "sysstat-12.6.1_loop0_sigterm.json").read_text()
    assert stopped("n1", 0, header) == NodeProbe(node="n1", raw_iostat=header)  # ran, no sample
    assert stopped("n2", NOT_BEGUN, "").error is None
    assert stopped("n3", 0, full).iostat  # samples
    assert stopped("n4", 3, "").error == "no in-job iostat was started"
    assert "not screener's" in str(stopped("n5", 6, "").error)
    probes = [stopped("node01", 0, header), stopped("node02", 0, header)]
    line = no_samples([*probes, stopped("node03", 3, "")], 5)
    assert line == (
        "iostat ran on node[01-02]; job shorter than one 5-s interval: no sample; "
        "no in-job iostat on node03 (not started)"
    )


def test_in_job_iostat_outliers_need_enough_reading_intervals() -> None:
    figs = {
        "a": NodeJobIo("a", 1.0, 1.0, 1.0, 9),
        "b": NodeJobIo("b", 1.2, 1.0, 1.0, 9),
        "c": NodeJobIo("c", 1.1, 1.0, 1.0, 9),
        "d": NodeJobIo("d", 400.0, 1.0, 1.0, 2),  # two slow intervals only
    }
    assert list(outliers(figs, 4.0, 50.0)) == ["d"]
    assert outliers(figs, 4.0, 50.0, min_samples=3) == {}
    figs["d"] = NodeJobIo("d", 400.0, 1.0, 1.0, 3)
    assert "3 samples" in outliers(figs, 4.0, 50.0, min_samples=3)["d"]


# ---- over real sshd ---------------------------------------------------------------------------
def _run(cluster: ClusterHandle, node: str, argv: list[str]) -> CommandResult:
    policy = TransportPolicy(
        ssh_config=str(cluster.ssh_config),
        known_hosts=str(cluster.known_hosts),
        connect_timeout_s=5.0,
    )

    async def go() -> CommandResult:
        transport = make_transport(policy)
        try:
            return await transport.run(node, argv, timeout=30.0)
        finally:
            await transport.close()

    return asyncio.run(go())


def test_planted_symlinks_in_tmp_are_not_written_through(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    node, job = cluster.nodes[0], "990001"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim_dir = tmp_path / "victim-dir"
    victim_dir.mkdir()
    base = f"/tmp/screener-iostat-{job}-{node}"
    planted = [Path(base), Path(f"{base}.pid"), Path(f"{base}.json")]  # new and old names
    for p in planted:
        p.unlink(missing_ok=True)
    try:
        os.symlink(victim_dir, planted[0])
        os.symlink(victim, planted[1])
        os.symlink(victim, planted[2])
        started = _run(cluster, node, start_argv(job, node, 1, 60, []))
        # the old names are not screener's any more: planting them blocks nothing
        assert started.exit_status == 0, started
        stop = _run(cluster, node, stop_argv(job, node))
        assert stop.exit_status in (0, NOT_BEGUN), stop
        assert victim.read_text() == "precious\n" and list(victim_dir.iterdir()) == []
        assert all(p.is_symlink() for p in planted)
    finally:
        for p in planted:
            p.unlink(missing_ok=True)

    # unplanted: the directory is made 0700, used, and removed by the stop
    assert _run(cluster, node, start_argv(job, node, 1, 60, [])).exit_status == 0
    where = Path(private_dir(job, node))
    st = where.lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    stopped_now = _run(cluster, node, stop_argv(job, node))
    assert stopped_now.exit_status in (0, NOT_BEGUN), stopped_now
    assert not where.exists()


def test_epilog_says_iostat_ran_when_the_job_was_shorter_than_an_interval(
    cluster: ClusterHandle,
) -> None:
    node, job = cluster.nodes[1], "990002"
    assert _run(cluster, node, start_argv(job, node, 30, 60, [])).exit_status == 0
    out = Path(private_dir(job, node)) / "out"
    deadline = time.monotonic() + 30
    while b'"statistics": [' not in _read(out):
        assert time.monotonic() < deadline, "iostat never printed its header"
        time.sleep(0.05)  # until iostat printed its header (a real condition, bounded)
    res = _run(cluster, node, stop_argv(job, node))
    probe = stopped(node, res.exit_status, res.stdout)
    assert probe.error is None and probe.iostat == ()
    assert no_samples([probe], 30) == (
        f"iostat ran on {node}; job shorter than one 30-s interval: no sample"
    )


def test_the_epilog_waits_for_a_deferred_start_then_stops_it(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    """A prolog under hookd starts in-job iostat after its exit code, holding the job's lock
    (screener.hooks.later). Here the test is that prolog: it holds the lock while the real
    epilog runs, and only then starts iostat. The epilog must wait for the lock and stop
    what was started (stopped first, it would say "not started" and leave iostat running
    until its bound), then remove the lock file."""
    nodes, job = list(cluster.nodes[:2]), "990003"
    spool = tmp_path / "spool"
    policy: Policy = policy_from_dict(
        {
            "store": {"url": f"sqlite:///{tmp_path}/s.db", "spool_dir": str(spool)},
            "transport": {
                "ssh_config": str(cluster.ssh_config),
                "known_hosts": str(cluster.known_hosts),
                "connect_timeout_s": 5.0,
                "command_timeout_s": 30.0,
            },
            "prolog": {"iostat_interval_s": 30},
        }
    )
    env = {
        "SLURM_JOB_ID": job,
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "SLURM_JOB_COMMENT": "screener=on",
    }
    lock = JobLock.take(str(spool), job)
    assert lock is not None
    log = HookLog("screener epilog")
    epilog = threading.Thread(target=run_epilog, args=(policy, env, log))
    epilog.start()
    try:
        for node in nodes:  # the deferred start, while the epilog is already running
            assert _run(cluster, node, start_argv(job, node, 30, 60, [])).exit_status == 0
        assert epilog.is_alive()  # it cannot have stopped anything: the lock is held
    finally:
        lock.release()
    epilog.join(timeout=120)
    assert not epilog.is_alive()
    said = " | ".join(log.lines)
    assert f"job {job}: waited " in said and "for in-job iostat to start" in said, said
    assert f"iostat ran on {fold_nodes(nodes)}" in said or "stored as run" in said, said
    assert "not started" not in said, said
    assert [n for n in nodes if Path(private_dir(job, n)).exists()] == []
    assert not (spool / f"iostat-{job}.lock").exists()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


# ---- the in-job drain under the actions lock (real Slurm + PostgreSQL) ----------------------
def _waiting_for_advisory_lock(url: str) -> bool:
    with open_store(url) as store, store.engine.connect() as conn:
        n = conn.scalar(
            text("select count(*) from pg_locks where locktype = 'advisory' and not granted")
        )
    return bool(n)


def test_in_job_drain_counts_the_guard_under_the_actions_lock(
    cluster: ClusterHandle,
    pg_dbs: object,
    pg_template: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another run holds the actions lock and records a drain of a partition node; the
    in-job drain waiting for the lock must count it: 2 drains of the partition are over the
    limit, so the guard drains nobody (counted before the lock, it saw 1 and drained)."""
    url = pg_dbs.create(template=pg_template)  # type: ignore[attr-defined]
    for k, v in cluster.env().items():
        monkeypatch.setenv(k, v)
    nodes = cluster.nodes
    assert len(nodes) >= 5, "needs 4 job nodes and another in the partition"
    policy: Policy = policy_from_dict(
        {
            "store": {"url": url},
            # 1 drain of the partition passes, 2 do not
            "slurm": {"backend": "cli", "partition_max_drain_fraction": 1.5 / len(nodes)},
            "ingest": {"drain": True},
        }
    )
    data = DATA / "ior" / "cluster" / "throttled"
    figures = judge_job(
        load_files([data / "ior-2.summary.json", data / "ior-2.ranks.csv"]),
        block_layout(nodes[:4], 1),
        VerdictPolicy(),
        IngestPolicy(),
    )
    assert [s.node for s in figures.slow] == [nodes[1]]
    done = Ingested("777", figures, "block", None)
    job = SlurmJob("777", tuple(nodes[:4]), partition="debug")
    lines: list[str] = []
    held, go = threading.Event(), threading.Event()

    def other_run() -> None:  # a concurrent prolog: drains nodes[4] while holding the lock
        with open_store(url) as store, actions_lock(store):
            held.set()
            go.wait(60)
            reason = "screener: rd 0.05x peers r1"
            now = datetime.now(UTC)
            SlurmRecords(store).record_drain(nodes[4], reason, now, None, Trigger.PROLOG, "776")

    holder = threading.Thread(target=other_run)
    holder.start()
    assert held.wait(30)
    result: list[list[str]] = []
    drainer = threading.Thread(
        target=lambda: result.append(drain_outliers(policy, job, done, lines.append, None))
    )
    drainer.start()
    deadline = time.monotonic() + 60
    while not _waiting_for_advisory_lock(url):
        assert time.monotonic() < deadline, "the in-job drain never waited for the lock"
        time.sleep(0.05)  # until the drain waits for the lock (pg_locks), bounded
    go.set()
    holder.join(60)
    drainer.join(120)
    assert result == [[]], lines
    assert any(line.startswith("guard:") for line in lines), lines  # the partition guard
    state = cluster.slurm("sinfo", "-h", "-N", "-n", nodes[1], "-o", "%T").stdout
    assert "drain" not in state, state
