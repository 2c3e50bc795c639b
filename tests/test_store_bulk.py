"""bulk.record_round / record_verdicts store exactly what the per-node path stores, on both
backends (COPY on PostgreSQL, executemany on SQLite)."""

from __future__ import annotations

import dataclasses

import pytest
from store_data import at, error_probe, full_probe, verdict

from screener.errors import StoreError
from screener.probe_data import RunSummary, Status, Trigger
from screener.store import Store, bulk

pytest_plugins = ["store_fixtures"]


def test_bulk_round_and_verdicts_read_back_like_the_per_node_path(db_store: Store) -> None:
    probes = [full_probe("node01"), error_probe("node02"), full_probe("node03")]
    summary = RunSummary(
        (
            verdict("node01", Status.OK, signals=("x",)),
            verdict("node02", Status.UNKNOWN),
            verdict("node03", Status.SLOW_READ, read_mb_s=20.0),
        ),
        peer_read_median_mb_s=3000.0,
    )
    names = [p.node for p in probes]
    one = db_store.start_run(Trigger.SWEEP, names, {}, None, "node[01-03]", at(0))
    for p in probes:
        db_store.record_probe(one, p, 1)
    db_store.record_verdicts(one, summary)
    two = db_store.start_run(Trigger.SWEEP, names, {}, None, "node[01-03]", at(1))
    bulk.record_round(db_store, two, probes)
    bulk.record_verdicts(db_store, two, summary)
    assert db_store.run_probes(two) == db_store.run_probes(one)
    assert db_store.run_verdicts(two) == db_store.run_verdicts(one)
    runs = {r.id: r for r in db_store.latest_runs(5)}
    assert (runs[two].n_ok, runs[two].n_slow, runs[two].n_unknown) == (1, 1, 1)
    with pytest.raises(StoreError, match="already recorded"):
        bulk.record_verdicts(db_store, two, summary)


def test_bulk_round_is_all_or_nothing(db_store: Store) -> None:
    bad = dataclasses.replace(full_probe("node02"), duration_s=float("nan"))
    run = db_store.start_run(Trigger.SWEEP, ["node01", "node02"], {}, None, "n", at(0))
    with pytest.raises(StoreError, match="non-finite"):
        bulk.record_round(db_store, run, [full_probe("node01"), bad])
    assert db_store.run_probes(run) == []
    with pytest.raises(StoreError, match="run 999 does not exist"):
        bulk.record_round(db_store, 999, [full_probe("node01")])
