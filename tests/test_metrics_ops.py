"""The alerting rules' own families over a real store (SQLite and PostgreSQL): last run
per trigger and status, the slowest recent prolog against its budget, the spool, and
the drain time of each node screener holds drained (tests/admin_seed.py's story)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from admin_seed import RESUMED, SLOW, seed_fleet
from prometheus_client import CollectorRegistry, generate_latest

from screener.metrics import StoreCollector
from screener.metrics.ops import OpsCollector
from screener.policy import Policy, PrologPolicy, StorePolicy
from screener.store import Store, open_store
from screener.store.engine import make_engine

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, pg_dbs


def _policy(spool: Path) -> Policy:
    return Policy(store=StorePolicy(spool_dir=str(spool)), prolog=PrologPolicy(budget_s=90.0))


def test_ops_families_from_the_seeded_fleet(db_url: str, tmp_path: Path) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    (tmp_path / "run-20261124T000000-1.jsonl").write_text("")
    (tmp_path / "run-20261124T000001-2.jsonl").write_text("")
    (tmp_path / "other.txt").write_text("")  # not a spooled run
    with open_store(db_url) as store:
        seed_fleet(store, now)
        registry = CollectorRegistry()
        registry.register(OpsCollector(store, _policy(tmp_path), clock=lambda: now))
        get = registry.get_sample_value
        sweep_end = now - timedelta(days=1) + timedelta(minutes=2)
        done = {"trigger": "sweep", "status": "done"}
        assert get("screener_last_run_timestamp_seconds", done) == sweep_end.timestamp()
        prolog_end = now - timedelta(hours=2) + timedelta(minutes=2)
        prolog = {"trigger": "prolog", "status": "done"}
        assert get("screener_last_run_timestamp_seconds", prolog) == prolog_end.timestamp()
        assert get("screener_last_run_timestamp_seconds", {**done, "status": "failed"}) is None
        assert get("screener_prolog_wall_max_seconds") is None  # started 2 h ago: outside
        assert get("screener_prolog_budget_seconds") == 90.0
        assert get("screener_spool_runs") == 2

        # seen half an hour after it started, the 2-minute prolog run is within the hour
        later = CollectorRegistry()
        later.register(
            OpsCollector(store, _policy(tmp_path), clock=lambda: now - timedelta(hours=1.5))
        )
        assert later.get_sample_value("screener_prolog_wall_max_seconds") == 120.0

        nodes = CollectorRegistry()
        nodes.register(StoreCollector(store))
        since = "screener_node_drained_since_timestamp_seconds"
        drained_at = now - timedelta(days=2)
        assert nodes.get_sample_value(since, {"node": SLOW}) == drained_at.timestamp()
        assert nodes.get_sample_value(since, {"node": RESUMED}) is None  # resumed since


def test_a_missing_spool_is_zero_and_a_dead_store_leaves_runs_out(tmp_path: Path) -> None:
    """No spool directory yet: nothing spooled. The database went away (port 1): the
    budget and spool stay, the run families are left out, the scrape does not fail."""
    store = Store(make_engine("postgresql+psycopg://screener@127.0.0.1:1/screener"))
    registry = CollectorRegistry()
    registry.register(OpsCollector(store, _policy(tmp_path / "absent")))
    try:
        text = generate_latest(registry).decode()
    finally:
        store.close()
    assert "screener_spool_runs 0.0" in text
    assert "screener_prolog_budget_seconds 90.0" in text
    assert "screener_last_run_timestamp_seconds" not in text
