"""`screener accuracy --by rule`: each verdict rule's record against what the jobs then
saw, shadowed or not. Pure classification, then through the store and the CLI (SQLite and
PostgreSQL) with the real slow-rank IOR outputs (rank 2 on node03 is the in-job outlier)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from screener.ingest.files import load_files
from screener.ingest.judge import judge_job
from screener.ingest.layout import block_layout
from screener.ingest.rule_accuracy import RuleRow, by_rule
from screener.ingest.service import store_rows
from screener.policy import VerdictPolicy
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import Store
from screener.store.jobs import IngestHead, InJobRow, PrologRow, record_ingest
from tests import cli_fork

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, db_store, pg_dbs

DATA = Path(__file__).resolve().parent / "data" / "ior"
T0 = datetime(2026, 11, 1, 22, 0, tzinfo=UTC)
OK, SLOW = Status.OK, Status.SLOW_READ


def _row(rows: list[RuleRow], rule: str) -> RuleRow:
    (row,) = [r for r in rows if r.rule == rule]
    return row


def test_each_rule_is_scored_on_the_nodes_that_ran_the_job() -> None:
    in_job = [InJobRow("7", "batch", T0, n, n != "n5", n == "n3") for n in ("n1", "n2", "n3", "n5")]
    at = T0 - timedelta(minutes=1)
    prolog = [
        PrologRow("7", 1, at, "n1", OK, ("shadow:peer_tail",)),  # ran, fine: false alarm
        PrologRow("7", 1, at, "n2", OK, ()),
        PrologRow("7", 1, at, "n3", OK, ("shadow:peer_tail", "shadow:ratio")),  # caught
        PrologRow("7", 1, at, "n5", OK, ("shadow:ratio",)),  # ran, not judged: not scored
        PrologRow("7", 1, at, "n9", SLOW, ("peer_read",)),  # drained: never ran the job
        PrologRow("8", 1, at, "n1", SLOW, ("peer_read",)),  # job 8 was never ingested
    ]
    rows = by_rule(in_job, prolog, shadow=("peer_tail", "ratio", "history"))
    assert [r.rule for r in rows] == ["peer_read", "ratio", "peer_tail", "history"]
    tail = _row(rows, "peer_tail")
    assert (tail.mode, tail.fired, tail.caught, tail.false_alarms, tail.misses) == (
        "shadow",
        2,
        1,
        1,
        0,
    )
    assert tail.precision == 0.5
    ratio = _row(rows, "ratio")
    assert (ratio.fired, ratio.caught, ratio.false_alarms, ratio.precision) == (2, 1, 0, 1.0)
    read = _row(rows, "peer_read")
    assert (read.mode, read.fired, read.drained, read.misses, read.precision) == (
        "live",
        1,
        1,
        1,
        None,
    )
    history = _row(rows, "history")  # shadowed, never fired: listed with its misses
    assert (history.fired, history.misses) == (0, 1)


def test_the_last_attempt_of_a_node_counts() -> None:
    in_job = [InJobRow("7", None, T0, "n1", True, False)]
    prolog = [
        PrologRow("7", 1, T0 - timedelta(minutes=9), "n1", SLOW, ("peer_read",)),
        PrologRow("7", 2, T0 - timedelta(minutes=1), "n1", OK, ()),
    ]
    assert by_rule(in_job, prolog) == []


def _seed(store: Store) -> None:
    signals = {
        "node01": ("shadow:peer_tail",),
        "node02": (),
        "node03": ("shadow:peer_tail",),
        "node04": (),
    }
    nodes = [*sorted(signals), "node05"]
    run = store.start_run(Trigger.PROLOG, nodes, {}, "500", "node[01-05]", T0)
    verdicts = [Verdict(n, OK, "would have drained", signals=s) for n, s in signals.items()]
    verdicts.append(Verdict("node05", SLOW, "seq read slow", signals=("peer_read",)))
    store.record_verdicts(run, RunSummary(tuple(verdicts)))
    store.finish_run(run, T0 + timedelta(seconds=20))
    files = ["ior-fpp-slowrank-summary.json", "ior-fpp-slowrank-ranks.csv"]
    four = ["node01", "node02", "node03", "node04"]
    figures = judge_job(
        load_files([DATA / f for f in files]), block_layout(four, 1), VerdictPolicy()
    )
    assert [s.node for s in figures.slow] == ["node03"]
    head = IngestHead("500", "batch", "node[01-04]", "block", tuple(files), figures.notes, T0)
    rows, slow = store_rows(figures)
    record_ingest(store, head, rows, slow, now=T0 + timedelta(seconds=5))


def test_accuracy_by_rule_through_the_store_and_the_cli(db_url: str, tmp_path: Path) -> None:
    from screener.store import open_store

    with open_store(db_url, upgrade=True) as store:
        _seed(store)
    config = tmp_path / "screener.toml"
    config.write_text('[verdict]\nshadow = ["peer_tail"]\n')
    env = {**os.environ, "SCREENER_DATABASE_URL": db_url, "SCREENER_CONFIG": str(config)}
    argv = ["accuracy", "--since", "3650d", "--by", "rule"]
    done = cli_fork.run([*argv, "--json"], timeout=120, env=env, check=True)
    doc = json.loads(done.stdout)
    rows = {r["rule"]: r for r in doc["rows"]}
    assert set(rows) == {"peer_read", "peer_tail"}
    assert rows["peer_tail"] == {
        "rule": "peer_tail",
        "mode": "shadow",
        "fired": 2,
        "caught": 1,
        "false_alarms": 1,
        "misses": 0,
        "drained": 0,
        "precision": 0.5,
    }
    assert rows["peer_read"]["drained"] == 1 and rows["peer_read"]["misses"] == 1
    assert "shadowed rule drains nobody" in doc["cannot_know"][0]
    table = cli_fork.run(argv, timeout=120, env=env, check=True)
    assert "peer_tail" in table.stdout and "shadow" in table.stdout
