"""A drain is recorded iff it was issued, even when the run is killed around ``scontrol``
(issue 11): the intent ("drain_pending", exact reason) is written first, the next run settles
it against Slurm's *current* reason.

Pure rule on real captured sinfo output; the store side on SQLite; then real kills (SIGKILL
from inside the real Slurm client, before and after scontrol) on the emulated cluster, settled
by `screener resume`.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from screener.hooks.drain_rules import DrainPlan, settle_intent
from screener.hooks.drains import DrainContext, apply_drains, finish_pending
from screener.probe_data import Trigger
from screener.slurm.cli_backend import CliSlurm
from screener.slurm.client import SlurmNode
from screener.slurm.parse import parse_sinfo
from screener.store import Store, open_store
from screener.store.slurm_records import SlurmRecords
from tests.hooked_cluster import run_screener, sinfo_nodes, write_config

SLURM = Path(__file__).parent / "data" / "slurm"
NOW = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
REASON = "screener: rd 0.05x peers r42"  # the reason in the captured drained node


def _captured(name: str) -> dict[str, SlurmNode]:
    return {n.name: n for n in parse_sinfo((SLURM / name).read_text())}


# ---- the pure rule ---------------------------------------------------------------------
def test_settle_intent_on_captured_sinfo() -> None:
    old = _captured("sinfo_22.05_drained.json")
    drained = next(n for n in old.values() if n.reason == REASON)
    assert settle_intent(REASON, drained) == (True, settle_intent(REASON, drained)[1])
    assert settle_intent(REASON + "x", drained)[0] is False  # another reason: not ours
    assert "not the intended" in settle_intent("screener: rd 0.04x peers r43", drained)[1]
    idle = next(n for n in old.values() if not n.drained)
    ok, why = settle_intent(REASON, idle)
    assert not ok and "before scontrol" in why
    assert settle_intent(REASON, None) == (
        False,
        "Slurm no longer lists the node; intent abandoned",
    )
    new = _captured("nodes_23.11_shape.json")  # state as a list, reason as an object
    assert settle_intent(REASON, new["cn002"])[0] is True
    assert settle_intent("RMA 42", new["cn003"])[0] is True  # any exact match, even MIXED
    assert settle_intent(REASON, new["cn003"])[0] is False


# ---- the store side --------------------------------------------------------------------
@pytest.fixture
def store(tmp_path: Path) -> Any:
    with open_store(f"sqlite:///{tmp_path}/s.db", upgrade=True) as s:
        yield s


def _run(store: Store, node: str, job: str = "7") -> int:
    return store.start_run(Trigger.PROLOG, [node], {}, job, node, NOW)


def test_intent_is_pending_until_a_later_phase_settles_it(store: Store) -> None:
    rec = SlurmRecords(store)
    a, b, c = "n01", "n02", "n03"
    runs = {n: _run(store, n) for n in (a, b, c)}
    for n in (a, b, c):
        rec.intend_drain(n, f"screener: wr 1MB/s r{runs[n]}", NOW, runs[n])
    pending = {p.node: p for p in rec.pending_drains()}
    assert set(pending) == {a, b, c}
    assert pending[a].trigger == Trigger.PROLOG and pending[a].job_id == "7"
    assert pending[a].reason == f"screener: wr 1MB/s r{runs[a]}"
    rec.record_drain(a, pending[a].reason, NOW, runs[a], Trigger.PROLOG, "7")  # phase 2
    store.record_event(b, "drain_failed", "scontrol: timeout", NOW, runs[b], pending[b].reason)
    assert [p.node for p in rec.pending_drains()] == [c]
    assert [p.node for p in rec.pending_drains([a, b])] == []
    assert rec.screener_reason(a) == pending[a].reason and rec.episodes(a)[0][3] == "7"
    assert rec.screener_reason(c) is None  # an intent is not a drain
    # Settled by a host whose clock is an hour behind: still the latest event.
    rec.settle_drain(pending[c], True, "Slurm shows it", NOW - timedelta(hours=1))
    assert rec.pending_drains() == []
    assert rec.screener_reason(c) == pending[c].reason
    assert [e.action for e in store.node_events(c)] == ["drain", "drain_pending"]
    (episode,) = rec.episodes(c)
    assert episode[0] == "prolog" and episode[1] == NOW and episode[2] is None


def test_abandoned_intent_is_no_drain(store: Store) -> None:
    rec = SlurmRecords(store)
    run = _run(store, "n01")
    rec.intend_drain("n01", "screener: rd slow r1", NOW, run)
    (p,) = rec.pending_drains()
    rec.settle_drain(p, False, "not drained in Slurm", NOW + timedelta(seconds=5))
    assert rec.pending_drains() == [] and rec.screener_reason("n01") is None
    assert rec.episodes("n01") == []
    events = store.node_events("n01")
    assert [e.action for e in events] == ["drain_abandoned", "drain_pending"]
    assert events[0].slurm_reason == "screener: rd slow r1"


# ---- real Slurm, real kills ------------------------------------------------------------
KILLER = """
import os, signal, sys
from datetime import UTC, datetime
from screener.hooks.drains import DrainContext, apply_drains
from screener.hooks.drain_rules import DrainPlan
from screener.probe_data import Trigger
from screener.slurm.cli_backend import CliSlurm
from screener.store import open_store
from screener.store.slurm_records import SlurmRecords

db, node, reason, when = sys.argv[1:5]

class KilledAround(CliSlurm):
    def drain(self, nodes, reason):
        if when == "after":
            super().drain(nodes, reason)  # the real scontrol
        os.kill(os.getpid(), signal.SIGKILL)  # what a node reboot or kill -9 does

store = open_store(db, upgrade=True)
run = store.start_run(Trigger.PROLOG, [node], {}, "7", node, datetime.now(UTC))
plan = DrainPlan(drain=((node, reason),))
ctx = DrainContext(KilledAround(), SlurmRecords(store), run, Trigger.PROLOG, "7",
                   datetime.now(UTC), False, print)
apply_drains(plan, ctx)
print("not killed")
"""


def _kill_around(
    cluster: Any, db: str, node: str, reason: str, when: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", KILLER, db, node, reason, when],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_kill_between_phases_is_settled_by_the_next_run(cluster: Any, tmp_path: Path) -> None:
    config, db = tmp_path / "screener.toml", f"sqlite:///{tmp_path}/screener.db"
    write_config(config, cluster, db, tmp_path / "log")
    after, before = cluster.nodes[:2]
    reasons = {after: "screener: rd 0.05x peers r1", before: "screener: rd 0.04x peers r2"}
    killed = _kill_around(cluster, db, after, reasons[after], "after")  # scontrol ran
    assert killed.returncode == -9 and "not killed" not in killed.stdout, killed.stderr
    states = sinfo_nodes(cluster)
    assert states[after]["reason"] == reasons[after] and "DRAIN" in states[after]["state_flags"]
    with open_store(db) as store:
        rec = SlurmRecords(store)
        assert [p.node for p in rec.pending_drains()] == [after]
        assert rec.screener_reason(after) is None  # unrecorded: not resumable yet

    # The next run first settles `after` (Slurm shows its reason: drain recorded), then is
    # killed itself before its own scontrol.
    killed = _kill_around(cluster, db, before, reasons[before], "before")
    assert killed.returncode == -9 and "settled: Slurm shows the intended" in killed.stdout
    assert "DRAIN" not in sinfo_nodes(cluster)[before]["state_flags"]
    with open_store(db) as store:
        rec = SlurmRecords(store)
        assert [p.node for p in rec.pending_drains()] == [before]
        assert rec.screener_reason(after) == reasons[after]

    res = run_screener(cluster, config, "resume", f"{after},{before}")
    assert res.returncode == 1, res.stderr  # `before` was never drained: nothing to resume
    assert "DRAIN" not in sinfo_nodes(cluster)[after]["state_flags"]  # settled, then resumed
    with open_store(db) as store:
        rec = SlurmRecords(store)
        assert rec.pending_drains() == []
        assert [e.action for e in store.node_events(after)] == ["resume", "drain", "drain_pending"]
        assert [e.action for e in store.node_events(before)] == ["drain_abandoned", "drain_pending"]
        (episode,) = rec.episodes(after)
        assert episode[0] == "prolog" and episode[2] is not None  # opened late, closed by resume


@contextmanager
def _on_cluster(cluster: Any, tmp_path: Path) -> Iterator[Store]:
    """A new SQLite store, with the Slurm client pointed at ``cluster`` (its environment)."""
    with (
        pytest.MonkeyPatch.context() as mp,
        open_store(f"sqlite:///{tmp_path}/screener.db", upgrade=True) as store,
    ):
        for k, v in cluster.env().items():
            mp.setenv(k, v)
        yield store


def test_a_live_runs_drain_and_a_settled_one_are_not_drained_twice(
    cluster: Any, tmp_path: Path
) -> None:
    """apply_drains settles earlier intents first, and skips a node another run drained."""
    node = cluster.nodes[2]
    client = CliSlurm()
    logs: list[str] = []
    with _on_cluster(cluster, tmp_path) as store:
        rec = SlurmRecords(store)
        first = _run(store, node)
        rec.intend_drain(node, "screener: wr 3MB/s r1", NOW, first)
        cluster.slurm(
            "scontrol", "update", f"nodename={node}", "state=drain", "reason=screener: wr 3MB/s r1"
        )
        second = _run(store, node)
        plan = DrainPlan(drain=((node, "screener: wr 2MB/s r2"),))
        ctx = DrainContext(client, rec, second, Trigger.SWEEP, None, NOW, False, logs.append)
        got = apply_drains(plan, ctx)
        assert got == [] and any("already drained by screener" in m for m in logs), logs
        assert finish_pending(client, rec, NOW, logs.append) == []  # nothing left
        assert sinfo_nodes(cluster)[node]["reason"] == "screener: wr 3MB/s r1"
        assert [e.action for e in store.node_events(node)] == ["drain", "drain_pending"]


def test_a_guarded_plan_drains_the_node_far_below_and_holds_the_others(
    cluster: Any, tmp_path: Path
) -> None:
    """Issue 44: the guard held two 0.44x nodes and let the 1/20 reader be "drained apart",
    yet apply_drains drained nobody once the plan carried a guard line (the reader ran the
    job). Now the held nodes get guard_trip events and the one apart is drained in Slurm."""
    far, held = cluster.nodes[0], (cluster.nodes[1], cluster.nodes[3])
    guard = "guard: 3 of 8 allocated nodes slow (> 0.34): shared cause suspected; ..."
    logs: list[str] = []
    with _on_cluster(cluster, tmp_path) as store:
        rec = SlurmRecords(store)
        run = _run(store, far)
        plan = DrainPlan(drain=((far, "screener: rd 0.04x peers r1"),), guard=guard, blocked=held)
        ctx = DrainContext(CliSlurm(), rec, run, Trigger.PROLOG, None, NOW, False, logs.append)
        try:
            assert apply_drains(plan, ctx) == [far], logs
            assert logs[0] == guard and f"drained {far}: screener: rd 0.04x peers r1" in logs
            nodes = sinfo_nodes(cluster)
            assert nodes[far]["reason"] == "screener: rd 0.04x peers r1"
            assert not any("DRAIN" in nodes[n]["state_flags"] for n in held), nodes
            assert [e.action for e in store.node_events(far)] == ["drain", "drain_pending"]
            assert all([e.action for e in store.node_events(n)] == ["guard_trip"] for n in held)
        finally:
            cluster.slurm("scontrol", "update", f"nodename={far}", "state=resume")


def test_acting_holds_the_actions_lock_reentrantly(store: Store, tmp_path: Path) -> None:
    """`acting` (prolog/sweep: decide + apply under one lock) lets apply_drains re-take it,
    while another process cannot (tests/test_concurrency.py covers the other process)."""
    from screener.hooks.drains import acting
    from screener.store.locks import actions_lock

    with acting(None):
        pass
    with acting(SlurmRecords(store)), actions_lock(store, wait_s=0.1):
        lockdir = tmp_path / ".s.db.locks"
        assert (lockdir / "actions.lock").stat().st_mode & 0o777 == 0o600
        assert lockdir.stat().st_mode & 0o077 == 0  # no one else can read or plant files
