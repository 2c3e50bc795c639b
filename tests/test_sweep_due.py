"""[sweep] max_age_h, the pure part: which busy nodes are due for a check, and how many
the partition guard leaves room for, and a dry run through the store (the emulated
cluster test: test_sweep_mode.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from screener.policy import Policy, SlurmPolicy, SweepPolicy
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.slurm.cli_backend import CliSlurm
from screener.slurm.client import SlurmNode, check_reason
from screener.store import Store
from screener.store.slurm_records import SlurmRecords
from screener.sweep.due import drain_due, due_nodes, due_reason, is_due, room

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_store, pg_dbs

NOW = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)
EVERY = {
    "n1": SlurmNode("n1", frozenset({"ALLOCATED"})),
    "n2": SlurmNode("n2", frozenset({"MIXED"})),
    "n3": SlurmNode("n3", frozenset({"IDLE"})),
    "n4": SlurmNode("n4", frozenset({"ALLOCATED", "DRAIN"}), "admin: bad dimm"),
    "n5": SlurmNode("n5", frozenset({"ALLOCATED"})),
}


def test_busy_nodes_unswept_for_max_age_are_due_oldest_first() -> None:
    first = NOW - timedelta(days=10)
    last = {"n1": NOW - timedelta(hours=30), "n5": NOW - timedelta(hours=2)}
    names = sorted(EVERY)
    # n2 never reached (since the first sweep), n1 30 h ago; n3 idle, n4 drained, n5 fresh
    assert due_nodes(EVERY, names, first, last, NOW, 24.0) == ["n2", "n1"]
    assert due_nodes(EVERY, names, first, last, NOW, 48.0) == ["n2"]
    assert due_nodes(EVERY, names, first, last, NOW, 0.0) == []  # off
    assert due_nodes(EVERY, names, None, {}, NOW, 24.0) == []  # no sweep ever ran


def test_sweeps_younger_than_max_age_make_nobody_due() -> None:
    """A new install: sweeps began 3 h ago, so a node they never reached is not late yet."""
    assert due_nodes(EVERY, sorted(EVERY), NOW - timedelta(hours=3), {}, NOW, 24.0) == []


def test_room_is_what_the_partition_guard_leaves() -> None:
    policy = Policy(slurm=SlurmPolicy(partition_max_drain_fraction=0.2))
    assert room(policy, 100, 0) == 20
    assert room(policy, 100, 19) == 1
    assert room(policy, 100, 25) == 0
    assert room(policy, 4, 0) == 0  # 0.8 of a node: none


def test_the_reason_is_screeners_own_and_slurm_accepts_it() -> None:
    reason = due_reason("screener:", 72.0)
    assert reason == "screener: due for its check: no sweep verdict in 72 h"
    check_reason(reason)  # raises if Slurm would refuse it
    assert is_due(reason, "screener:")
    assert not is_due("screener: rd 0.05x peers r42", "screener:")
    assert not is_due(None, "screener:")


def test_a_dry_run_records_would_drain_for_the_oldest_within_the_guard(db_store: Store) -> None:
    """Through a real store: sweeps began 3 days ago; n1 was swept 2 days ago, n2 and n5
    never; the partition of 4 at fraction 0.5 leaves room for 2: n2 and n5 (never reached,
    so the oldest), recorded as would_drain with the due reason; Slurm is not called."""
    at = NOW - timedelta(days=3)
    old = db_store.start_run(Trigger.SWEEP, ["n3"], {}, None, "n3", at)
    db_store.finish_run(old, at + timedelta(minutes=5))
    swept = db_store.start_run(Trigger.SWEEP, ["n1"], {}, None, "n1", NOW - timedelta(days=2))
    db_store.record_verdicts(swept, RunSummary((Verdict("n1", Status.OK, "ok"),)))
    db_store.finish_run(swept, NOW - timedelta(days=2) + timedelta(minutes=5))
    run = db_store.start_run(Trigger.SWEEP, ["n3"], {}, None, "n3", NOW)
    policy = Policy(
        slurm=SlurmPolicy(partition_max_drain_fraction=0.5), sweep=SweepPolicy(max_age_h=24.0)
    )
    lines: list[str] = []
    records = SlurmRecords(db_store)
    partition = ["n1", "n2", "n3", "n5"]
    unheld = ["n1", "n2", "n5"]
    done = drain_due(
        policy, CliSlurm(), records, EVERY, partition, unheld, run, NOW, True, lines.append
    )
    assert done == ["n2", "n5"]
    assert "due for a check: 3 nodes, the guard leaves room for 2" in lines
    for node in ("n2", "n5"):
        (event,) = db_store.node_events(node)
        assert (event.action, event.slurm_reason) == (
            "would_drain",
            "screener: due for its check: no sweep verdict in 24 h",
        )
    assert db_store.node_events("n1") == []
