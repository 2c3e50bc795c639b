"""Concurrent runs on one results DB (issue 11), on SQLite and on PostgreSQL (a scratch
database each test creates and drops):

- 16 prolog-style screens on disjoint nodes plus a sweep-style screen overlapping two of
  them, as separate processes started together: every run stored, no node probed by two
  runs at once (the sweep waits for the node locks, screener.store.locks);
- a node whose lock another run holds past the deadline is UNKNOWN "busy: probed by run N";
- the same over real sshd on the emulated cluster (one screen per node plus an overlapping one);
- on the emulated cluster, 16 processes racing to drain one node, then 16 racing to resume
  it: one drain and one resume in Slurm and in the records (the actions lock);
- the locks themselves: exclusive across processes, re-entrant within one, and free again
  when their holder is SIGKILLed.

Probes run the real pipeline with the local transport: the node names are labels that the
worker maps to this machine (so 16 "nodes" exist here), each screen on its own target.
Processes start together by reading a byte from stdin (no sleeps).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from screener.errors import StoreError
from screener.store import open_store
from screener.store.locks import NodeLocks, actions_lock
from screener.store.tables import NodeProbeRecord, NodeRecord, RunRecord
from tests.hooked_cluster import SCREENER, sinfo_nodes, write_config

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, pg_dbs

PROLOGS = 16
OVERLAP = ["n01", "n02"]  # the sweep's nodes, also screened by two prologs

SCREEN_WORKER = """
import json, os, sys, time
import screener.pipeline as pipeline
import screener.transport.local as local
from screener import app
from screener.probe_data import Trigger
from screener.policy import load_policy

config, trace, trigger, job, *nodes = sys.argv[1:]
here = local.local_names()
local.local_names = lambda: here | frozenset(nodes)  # these labels name this machine
probe = pipeline.probe_node

async def traced(transport, node, policy, jobs=None):
    t0 = time.time()
    try:
        return await probe(transport, node, policy, jobs)
    finally:
        with open(trace, "a") as f:  # one O_APPEND line per probe
            rec = {"node": node, "pid": os.getpid(), "t0": t0, "t1": time.time()}
            f.write(json.dumps(rec) + "\\n")

pipeline.probe_node = traced
policy = load_policy(config)
sys.stdin.read(1)  # the start line: every worker is up
request = app.ScreenRequest(
    tuple(nodes), policy, trigger=Trigger(trigger), job_id=job or None, deadline_s=240
)
res = app.run_screen(request)
print(json.dumps({"run": res.run_id, "error": res.store_error,
                  "verdicts": {v.node: [v.status.value, v.reason] for v in res.summary.verdicts}}))
"""


def _config(path: Path, db: str, target: Path, spool: Path, concurrency: int = 256) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"[probe]\ntarget = {json.dumps(str(target))}\nsize_mib = 16\nruntime_s = 0.4\n"
        "ramp_s = 0.1\nfacts = false\n"
        f'[transport]\nkind = "local"\nconcurrency = {concurrency}\n'
        f"[store]\nurl = {json.dumps(db)}\nspool_dir = {json.dumps(str(spool))}\n"
        "[verdict]\nconfirm = false\n"
    )
    return path


def _start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _go_and_wait(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("g")
        p.stdin.flush()
    outs = [p.communicate(timeout=600) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]


def _overlaps(trace: Path) -> list[tuple[str, Any, Any]]:
    """Pairs of probes of one node by two processes whose intervals intersect."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        by_node.setdefault(rec["node"], []).append(rec)
    bad = []
    for node, recs in by_node.items():
        recs.sort(key=lambda r: r["t0"])
        for a, b in itertools.pairwise(recs):
            if a["pid"] != b["pid"] and b["t0"] < a["t1"]:
                bad.append((node, a, b))
    return bad


def test_16_prologs_and_a_sweep_at_once(db_url: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    spool = tmp_path / "spool"
    procs = []
    for i in range(1, PROLOGS + 1):
        node = f"n{i:02d}"
        cfg = _config(tmp_path / f"{node}.toml", db_url, tmp_path / node, spool)
        procs.append(
            _start(
                [sys.executable, "-c", SCREEN_WORKER, str(cfg), str(trace), "prolog", str(i), node]
            )
        )
    # The sweep: its own target, one node at a time, over two nodes the prologs also probe.
    cfg = _config(tmp_path / "sweep.toml", db_url, tmp_path / "sweep", spool, concurrency=2)
    procs.append(
        _start([sys.executable, "-c", SCREEN_WORKER, str(cfg), str(trace), "sweep", "", *OVERLAP])
    )
    results = _go_and_wait(procs)

    outs = []
    for code, out, err in results:
        assert code == 0, err[-2000:]
        outs.append(json.loads(out))
    assert all(o["error"] is None for o in outs), outs
    assert all(not v[1].startswith(n + ": busy") for o in outs for n, v in o["verdicts"].items())
    assert _overlaps(trace) == []
    probes = Counter(json.loads(line)["node"] for line in trace.read_text().splitlines())
    assert probes == {**{f"n{i:02d}": 1 for i in range(3, PROLOGS + 1)}, "n01": 2, "n02": 2}

    with open_store(db_url) as store, store.engine.connect() as conn:
        runs = conn.execute(select(RunRecord.trigger, RunRecord.status, RunRecord.id)).all()
        assert Counter((r.trigger, r.status) for r in runs) == {
            ("prolog", "done"): PROLOGS,
            ("sweep", "done"): 1,
        }
        assert sorted(r.id for r in runs) == sorted(o["run"] for o in outs)
        rows = conn.execute(
            select(NodeRecord.name, func.count())
            .join(NodeProbeRecord, NodeProbeRecord.node_id == NodeRecord.id)
            .group_by(NodeRecord.name)
        ).all()
        assert dict(rows) == dict(probes)  # every probe stored, once


def test_node_held_by_another_run_is_unknown_busy(db_url: str, tmp_path: Path) -> None:
    """`screener screen --local` on a node another run is probing: after waiting out its
    deadline it reports UNKNOWN busy naming that run, and exits without judging it."""
    cfg = _config(tmp_path / "c.toml", db_url, tmp_path / "t", tmp_path / "spool")
    host = socket.gethostname()

    async def hold_and_screen() -> subprocess.CompletedProcess[str]:
        with open_store(db_url) as store:
            locks = NodeLocks(store, holder="run 99")
            try:
                async with locks.hold(host) as busy:
                    assert busy is None
                    argv = [str(SCREENER), "--config", str(cfg), "screen", "--local"]
                    argv += ["--deadline", "3", "--json"]
                    return await asyncio.to_thread(
                        subprocess.run, argv, capture_output=True, text=True, timeout=120
                    )
            finally:
                locks.close()

    res = asyncio.run(hold_and_screen())
    doc = json.loads(res.stdout)
    (node,) = doc["nodes"]
    assert node["status"] == "UNKNOWN" and "busy: probed by run 99" in node["reason"], node


# ---- real Slurm: racing drains and resumes -------------------------------------------------
ACTION_WORKER = """
import json, sys
from datetime import UTC, datetime
from screener.hooks.drains import DrainContext, apply_drains, resume_node
from screener.hooks.drain_rules import DrainPlan
from screener.probe_data import Trigger
from screener.slurm.cli_backend import CliSlurm
from screener.store import open_store
from screener.store.slurm_records import SlurmRecords

db, node, mode, job = sys.argv[1:5]
client, store = CliSlurm(), open_store(db)
records = SlurmRecords(store)
run = store.start_run(Trigger.PROLOG, [node], {}, job, node, datetime.now(UTC))
sys.stdin.read(1)
now = datetime.now(UTC)
if mode == "drain":
    plan = DrainPlan(drain=((node, f"screener: rd slow r{run}"),))
    ctx = DrainContext(client, records, run, Trigger.PROLOG, job, now, False, print)
    got = apply_drains(plan, ctx)
else:
    (current,) = client.nodes([node])
    got = resume_node(current, client, records, now, run, "race", False, print)
print(json.dumps(bool(got)))
"""


def test_16_racing_drains_then_resumes_act_once(cluster: Any, db_url: str, tmp_path: Path) -> None:
    node = cluster.nodes[3]
    env = cluster.env()

    def race(mode: str) -> list[bool]:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", ACTION_WORKER, db_url, node, mode, str(i)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for i in range(1, PROLOGS + 1)
        ]
        done = _go_and_wait(procs)
        assert all(code == 0 for code, _, _ in done), [e[-500:] for _, _, e in done]
        return [json.loads(out.splitlines()[-1]) for _, out, _ in done]

    assert sum(race("drain")) == 1
    state = sinfo_nodes(cluster)[node]
    assert "DRAIN" in state["state_flags"] and state["reason"].startswith("screener: rd slow r")
    with open_store(db_url) as store:
        actions = Counter(e.action for e in store.node_events(node))
        assert actions == {"drain_pending": 1, "drain": 1}
        assert store.node_events(node)[0].slurm_reason == state["reason"]

    assert sum(race("resume")) == 1
    assert "DRAIN" not in sinfo_nodes(cluster)[node]["state_flags"]
    with open_store(db_url) as store:
        actions = Counter(e.action for e in store.node_events(node))
        assert actions == {"drain_pending": 1, "drain": 1, "resume": 1}


# ---- the locks themselves ------------------------------------------------------------------
HOLDER = """
import asyncio, sys
from screener.store import open_store
from screener.store.locks import NodeLocks, actions_lock

db, what = sys.argv[1:3]
store = open_store(db)

async def node() -> None:
    locks = NodeLocks(store, holder="run 5")
    async with locks.hold("n01") as busy:
        assert busy is None
        print("held", flush=True)
        sys.stdin.read(1)

if what == "actions":
    with actions_lock(store):
        with actions_lock(store):  # re-entrant in one thread
            print("held", flush=True)
            sys.stdin.read(1)
else:
    asyncio.run(node())
"""


def _holder(db_url: str, what: str) -> subprocess.Popen[str]:
    proc = _start([sys.executable, "-c", HOLDER, db_url, what])
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_actions_lock_excludes_other_processes_until_released_or_killed(db_url: str) -> None:
    with open_store(db_url) as store:
        for end in ("release", "kill"):
            proc = _holder(db_url, "actions")
            try:
                try:
                    with actions_lock(store, wait_s=0.3):
                        raise AssertionError("took a lock another process holds")
                except StoreError as exc:
                    assert "held the Slurm-actions lock for more than 0.3 s" in str(exc)
            finally:
                if end == "kill":
                    proc.kill()  # SIGKILL: the kernel / the server drops the lock
                else:
                    _go_and_wait([proc])
                proc.wait(timeout=60)
            with actions_lock(store, wait_s=30):
                pass


def test_node_lock_of_a_killed_run_is_free(db_url: str) -> None:
    async def try_n01(store: Any, wait_s: float) -> str | None:
        locks = NodeLocks(store, holder="run 6", wait_s=wait_s)
        try:
            async with locks.hold("n01") as busy:
                return busy
        finally:
            locks.close()

    with open_store(db_url) as store:
        proc = _holder(db_url, "node")
        try:
            assert asyncio.run(try_n01(store, 0.3)) == "run 5"
            assert asyncio.run(try_n01(store, 0.3)) == "run 5"  # a failed try leaks nothing
        finally:
            proc.kill()
            proc.wait(timeout=60)
        assert asyncio.run(try_n01(store, 30)) is None


def test_screens_over_ssh_at_once_never_share_a_node(
    cluster: Any, db_url: str, tmp_path: Path
) -> None:
    """The same over real sshd: one screen per cluster node plus one over two of them."""
    trace, cfg = tmp_path / "trace.jsonl", tmp_path / "screener.toml"
    write_config(
        cfg,
        cluster,
        db_url,
        tmp_path / "log",
        store={"spool_dir": str(tmp_path / "spool")},
        verdict={"confirm": False},
        probe={"facts": False},
    )
    env = cluster.env()
    jobs = [("prolog", str(i), [node]) for i, node in enumerate(cluster.nodes, 1)]
    jobs.append(("sweep", "", cluster.nodes[:2]))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCREEN_WORKER, str(cfg), str(trace), trig, job, *nodes],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for trig, job, nodes in jobs
    ]
    results = _go_and_wait(procs)
    assert all(code == 0 for code, _, _ in results), [e[-1000:] for _, _, e in results]
    outs = [json.loads(out) for _, out, _ in results]
    assert all(o["error"] is None for o in outs), outs
    assert _overlaps(trace) == []
    probes = Counter(json.loads(line)["node"] for line in trace.read_text().splitlines())
    assert probes == {n: 2 if n in cluster.nodes[:2] else 1 for n in cluster.nodes}
    with open_store(db_url) as store, store.engine.connect() as conn:
        runs = conn.execute(select(RunRecord.trigger, RunRecord.status)).all()
        assert Counter(runs) == {("prolog", "done"): len(cluster.nodes), ("sweep", "done"): 1}
        stored = conn.scalar(select(func.count()).select_from(NodeProbeRecord))
        assert stored == sum(probes.values())
