"""The prolog's read of each node's latest verdicts: one bounded query on SQLite and PostgreSQL,
checked against the obvious answer computed from what was stored."""

from __future__ import annotations

import random
from datetime import timedelta

from store_data import at, verdict

from screener.probe_data import RunSummary, Status, Trigger
from screener.store import Store
from screener.store.slurm_records import SlurmRecords

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, empty_db_url, pg_dbs, db_store

NODES = ["node01", "node02", "node03", "node04"]
RECIPES = ["full", "tri", None]
STATUSES = [Status.OK, Status.SLOW_READ, Status.DEGRADED, Status.UNKNOWN]


def _store_runs(store: Store, seed: int) -> list[tuple[int, str, str, float, str | None]]:
    """Random runs (some at the same start time: the later run is the newer) over most nodes;
    node04 is never judged. Returns (verdict order, node, status, hours, recipe) as stored."""
    rng = random.Random(seed)
    stored = []
    for i in range(40):
        hours = float(rng.randint(0, 2))  # many runs share a start: the later run is newer
        recipe = rng.choice(RECIPES)
        nodes = rng.sample(NODES[:3], rng.randint(1, 3))
        statuses = {n: rng.choice(STATUSES) for n in nodes}
        rid = store.start_run(Trigger.PROLOG, sorted(nodes), {}, str(i), ",".join(nodes), at(hours))
        store.record_verdicts(
            rid,
            RunSummary(tuple(verdict(n, st, recipe=recipe) for n, st in statuses.items())),
        )
        store.finish_run(rid, at(hours) + timedelta(minutes=1))
        stored += [(len(stored), n, st.value, hours, recipe) for n, st in sorted(statuses.items())]
    return stored


def _expected(
    stored: list[tuple[int, str, str, float, str | None]], skip: str | None
) -> dict[str, tuple[str, float]]:
    out: dict[str, tuple[str, float]] = {}
    for _, node, status, hours, recipe in sorted(stored, key=lambda r: (r[3], r[0])):
        if skip is None or recipe != skip:
            out[node] = (status, hours)
    return out


def _hours(got: dict[str, tuple[str, object]]) -> dict[str, tuple[str, float]]:
    return {n: (st, (when - at(0)).total_seconds() / 3600) for n, (st, when) in got.items()}  # type: ignore[operator]


def test_latest_any_and_latest_apart_from_one_recipe_match_the_stored_runs(
    db_store: Store,
) -> None:
    stored = _store_runs(db_store, seed=3)
    records = SlurmRecords(db_store)
    every, full = records.latest_verdicts_apart(NODES, "tri")
    assert _hours(every) == _expected(stored, None)
    assert _hours(full) == _expected(stored, "tri")
    assert "node04" not in every and "node04" not in full
    # the single-answer form agrees, and without a recipe both answers are the same
    assert records.latest_verdicts(NODES) == every
    assert records.latest_verdicts(NODES, exclude_recipe="tri") == full
    assert records.latest_verdicts_apart(NODES, None) == (every, every)
    assert records.latest_verdicts_apart([], "tri") == ({}, {})


def test_a_node_judged_only_by_the_excluded_recipe_has_no_other_verdict(db_store: Store) -> None:
    rid = db_store.start_run(Trigger.PROLOG, ["node01"], {}, "1", "node01", at(1))
    db_store.record_verdicts(rid, RunSummary((verdict("node01", Status.OK, recipe="tri"),)))
    every, other = SlurmRecords(db_store).latest_verdicts_apart(["node01"], "tri")
    assert every == {"node01": ("OK", at(1))} and other == {}
