"""The accuracy collector over a real store (SQLite and PostgreSQL): the seeded fleet plus
one screened, ingested job with one miss (tests/accuracy_seed.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from accuracy_seed import MISSED, PARTITION, seed_accuracy
from admin_seed import seed_fleet
from prometheus_client import CollectorRegistry, generate_latest

from screener.metrics.accuracy import AccuracyCollector
from screener.store import Store, open_store
from screener.store.engine import make_engine

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, db_url, pg_dbs


def _sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_gauges_count_the_miss_per_partition_within_the_window(db_url: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    with open_store(db_url) as store:
        seed_fleet(store, now)
        seed_accuracy(store, now)
        registry = CollectorRegistry()
        registry.register(AccuracyCollector(store, clock=lambda: now))
        p = {"partition": PARTITION}
        assert _sample(registry, "screener_accuracy_jobs", **p) == 1
        assert _sample(registry, "screener_accuracy_screened_jobs", **p) == 1
        assert _sample(registry, "screener_accuracy_nodes", **p, **{"class": "miss"}) == 1
        assert _sample(registry, "screener_accuracy_nodes", **p, **{"class": "stayed_ok"}) == 3
        assert _sample(registry, "screener_accuracy_nodes", **p, **{"class": "caught"}) == 0
        assert _sample(registry, "screener_accuracy_miss_ratio", **p) == 0.25
        assert _sample(registry, "screener_accuracy_window_seconds") == 30 * 86400
        text = generate_latest(registry).decode()
        assert "screener_accuracy_miss_ratio" in text and MISSED not in text  # no node labels

        # a window that starts after the job was observed: no partition series at all
        later = CollectorRegistry()
        later.register(AccuracyCollector(store, 86400, clock=lambda: now + timedelta(days=2)))
        assert _sample(later, "screener_accuracy_jobs", **p) is None
        assert _sample(later, "screener_accuracy_window_seconds") == 86400


def test_a_store_failure_leaves_the_gauges_out_without_failing() -> None:
    """The database went away (nothing listens on port 1): no gauges, no exception."""
    store = Store(make_engine("postgresql+psycopg://screener@127.0.0.1:1/screener"))
    registry = CollectorRegistry()
    registry.register(AccuracyCollector(store))
    try:
        assert generate_latest(registry) == b""
    finally:
        store.close()


def test_rule_gauges_list_shadowed_rules_with_their_misses(db_url: str) -> None:
    """The seeded job's prolog verdicts carry no signal: a shadowed rule that never fired
    is listed with the one miss (node04), live rules that never fired are not listed."""
    now = datetime.now(UTC).replace(microsecond=0)
    with open_store(db_url) as store:
        seed_fleet(store, now)
        seed_accuracy(store, now)
        registry = CollectorRegistry()
        registry.register(AccuracyCollector(store, clock=lambda: now, shadow=("peer_tail",)))
        tail = {"rule": "peer_tail", "mode": "shadow"}
        assert _sample(registry, "screener_accuracy_rule_nodes", **tail, **{"class": "misses"}) == 1
        assert _sample(registry, "screener_accuracy_rule_nodes", **tail, **{"class": "fired"}) == 0
        text = generate_latest(registry).decode()
        assert 'rule="peer_read"' not in text
