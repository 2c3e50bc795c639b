"""Remote failures and kill safety on the emulated cluster (real sshd per node, real fio).

- SIGTERM during a screen over SSH: the fio/iostat left on the nodes are found by their run
  tag (SCREENER_RUN in their environment) and killed by pid; the run is marked failed.
- A node whose sshd accepts TCP and never answers, and a node whose sshd session dies while
  fio runs, are UNKNOWN with the reason, and the run ends within its budget.
- ``[probe] keep_file = false`` removes the probe file; a kept one is mode 0600.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deploy.minicluster import ClusterHandle
from screener import app
from screener.app import make_transport
from screener.policy import Policy, ProbePolicy, StorePolicy, TransportPolicy
from screener.probe_data import Status
from screener.transport.base import CommandResult
from tests import cli_fork

pytestmark = pytest.mark.cluster
SCREENER = [sys.executable, "-m", "screener.cli"]


def tagged_pids(tag: str) -> list[int]:
    """Processes (on any node: the emulated nodes share our pid namespace) carrying ``tag``."""
    want = f"SCREENER_RUN={tag}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if want in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def fio_wrappers(tag: str) -> list[int]:
    """The `timeout ... fio --time_based` wrappers of run ``tag``: one per node (fio shows
    up twice under each, its main process and the forked job, so those are not counted)."""
    return [
        p
        for p in tagged_pids(tag)
        if b"--time_based" in cmdline(p) and cmdline(p).split(b"\0")[0].endswith(b"timeout")
    ]


def wait_for(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def config(cluster: ClusterHandle, tmp_path: Path, runtime_s: float, extra: str = "") -> Path:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[probe]\ntarget = "{cluster.scratch}"\nsize_mib = 16\nruntime_s = {runtime_s}\n'
        f"ramp_s = 0.2\nrand_read = false\n{extra}\n"
        f'[transport]\nssh_config = "{cluster.ssh_config}"\nknown_hosts = "{cluster.known_hosts}"\n'
        "connect_timeout_s = 2.0\n"
        f'[store]\nspool_dir = "{tmp_path}/spool"\n'
    )
    return cfg


def live_tag(tmp_path: Path) -> str:
    (marker,) = (tmp_path / "spool").glob("live-*.json")
    return str(json.loads(marker.read_text())["uid"])


def test_sigterm_kills_the_remote_fio_by_run_tag(cluster: ClusterHandle, tmp_path: Path) -> None:
    nodes = cluster.nodes[:2]
    db = tmp_path / "db.sqlite"
    proc = subprocess.Popen(
        [*SCREENER, "--config", str(config(cluster, tmp_path, 60)), "screen", ",".join(nodes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SCREENER_DATABASE_URL": f"sqlite:///{db}"},
    )
    wait_for(lambda: list((tmp_path / "spool").glob("live-*.json")), 60, "the live marker")
    tag = live_tag(tmp_path)
    wait_for(lambda: len(fio_wrappers(tag)) == len(nodes), 120, "fio on every node")
    remote = tagged_pids(tag)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    # Without the cleanup, fio would run on for ~60 s (the channel close sends no signal).
    assert remote and tagged_pids(tag) == []
    assert not any(Path(f"/proc/{p}").exists() and b"fio" in cmdline(p) for p in remote)
    with sqlite3.connect(db) as con:
        assert con.execute("select status from runs").fetchall() == [("failed",)]


def test_hung_sshd_and_dead_session_are_unknown_within_budget(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    good, dying = cluster.nodes[0], cluster.nodes[1]  # one of them loses its session
    with socket.socket() as silent:  # accepts TCP (kernel backlog), never sends a banner
        silent.bind(("127.0.9.251", 0))
        silent.listen(8)
        ssh_config = tmp_path / "ssh_config"
        ssh_config.write_text(
            f"Host hung01\n  HostName 127.0.9.251\n  Port {silent.getsockname()[1]}\n\n"
            + Path(cluster.ssh_config).read_text()
        )
        policy = app.screen_policy(
            Policy(
                probe=ProbePolicy(
                    target=cluster.scratch, size_mib=16, runtime_s=20, ramp_s=0.2, rand_read=False
                ),
                transport=TransportPolicy(
                    ssh_config=str(ssh_config),
                    known_hosts=str(cluster.known_hosts),
                    connect_timeout_s=2.0,
                    command_timeout_s=30,
                ),
                store=StorePolicy(spool_dir=str(tmp_path / "spool")),
            ),
            confirm=False,
        )
        killed: list[int] = []

        def kill_session_when_fio_runs() -> None:
            # The node "reboots": kill -9 the sshd session serving its fio (fio's timeout
            # wrapper's parent), as the lost-connection transport test does.
            tag = live_tag(tmp_path)
            for pid in tagged_pids(tag):
                if b"--time_based" in cmdline(pid) and b"timeout" in cmdline(pid).split(b"\0")[0]:
                    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    os.kill(ppid, signal.SIGKILL)  # the first node found running fio
                    killed.append(ppid)
                    return

        def watcher() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not killed:
                if list((tmp_path / "spool").glob("live-*.json")):
                    with contextlib.suppress(OSError, ValueError):  # raced a process exit
                        kill_session_when_fio_runs()
                time.sleep(0.1)

        t = threading.Thread(target=watcher, daemon=True)
        t.start()
        started = time.monotonic()
        result = app.run_screen(
            app.ScreenRequest(("hung01", good, dying), policy, store_results=False)
        )
        took = time.monotonic() - started
        t.join(5)
    by_node = {v.node: v for v in result.summary.verdicts}
    assert by_node["hung01"].status is Status.UNKNOWN
    assert "no SSH answer" in by_node["hung01"].reason
    assert killed, "the watcher found a tagged fio session to kill"
    unknown = [n for n in (good, dying) if by_node[n].status is Status.UNKNOWN]
    assert len(unknown) == 1  # the node whose session died; the other measured normally
    assert "lost" in by_node[unknown[0]].reason or "unreachable" in by_node[unknown[0]].reason
    # Budget: the 20 s probe plus connect timeout and slack, not fio's command timeout chain.
    assert took < 20 + 0.2 + 2 + 30, took


def test_keep_file_false_removes_the_probe_file(cluster: ClusterHandle, tmp_path: Path) -> None:
    node = cluster.nodes[2]
    probe = f"{cluster.scratch}/.screener/probe"

    def on_node(*cmd: str) -> CommandResult:
        async def go() -> CommandResult:
            t = make_transport(
                TransportPolicy(
                    ssh_config=str(cluster.ssh_config), known_hosts=str(cluster.known_hosts)
                )
            )
            try:
                return await t.run(node, list(cmd), timeout=30)
            finally:
                await t.close()

        return asyncio.run(go())

    assert on_node("rm", "-f", probe).exit_status == 0
    for keep, expect in ((True, "600"), (False, "gone")):
        cfg = config(cluster, tmp_path, 0.5, f"keep_file = {str(keep).lower()}")
        res = cli_fork.run(
            ["--config", str(cfg), "screen", node, "--no-store", "--no-confirm"], timeout=300
        )
        assert res.returncode in (0, 3), res.stderr
        mode = on_node("stat", "-c", "%a", probe)
        assert (mode.stdout.strip() or "gone") == expect, (keep, mode.stdout, mode.stderr)


def test_sigterm_during_a_prolog_stops_fio_and_fails_the_run(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    """PrologEpilogTimeout sends SIGTERM: the prolog stops fio on its nodes (by run tag),
    marks its run failed, drains nobody and exits 143 with one line saying so."""
    nodes = cluster.nodes[:2]
    db = tmp_path / "db.sqlite"
    cfg = config(cluster, tmp_path, 60)
    cfg.write_text(
        cfg.read_text()
        + f'[prolog]\ncomment_token = "screener=on"\nlog_file = "{tmp_path}/prolog.log"\n'
    )
    env = {
        **cluster.env(),
        "SCREENER_DATABASE_URL": f"sqlite:///{db}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "SLURM_JOB_NAME": "ior",
        "SLURM_JOB_COMMENT": "screener=on",
    }
    proc = subprocess.Popen(
        [*SCREENER, "--config", str(cfg), "prolog"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    wait_for(lambda: list((tmp_path / "spool").glob("live-*.json")), 60, "the live marker")
    tag = live_tag(tmp_path)
    wait_for(lambda: len(fio_wrappers(tag)) == len(nodes), 120, "fio on every node")
    remote = tagged_pids(tag)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    assert remote and tagged_pids(tag) == []
    with sqlite3.connect(db) as con:
        assert con.execute("select trigger, job_id, status from runs").fetchall() == [
            ("prolog", "4242", "failed")
        ]
        assert con.execute("select count(*) from node_events").fetchone() == (0,)
