"""The store collector without Prometheus: names and base units, the incremental probe
histogram, the early warning's gauges from the stored trend marks, a store failure as
screener_store_up 0, and the atomic textfile."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from admin_seed import NODES, SLOW, Seeded, _one_run, seed_fleet
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from store_data import full_probe
from trend_seed import DECLINING, seed_declining

from screener.errors import ConfigError
from screener.metrics import StoreCollector, parse_listen, write_textfile
from screener.policy import Policy, TrendPolicy
from screener.probe_data import Status, Trigger
from screener.store import Store, open_store
from screener.store.migrate import upgrade
from screener.store.trend_marks import refresh_marks
from screener.verdict.trend import TrendStatus
from tests import cli_fork

pytest_plugins = ["store_fixtures"]

NOW = datetime.now(UTC).replace(microsecond=0)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


@pytest.fixture
def fleet(db_store: Store) -> tuple[Store, Seeded, CollectorRegistry]:
    seeded = seed_fleet(db_store, NOW)
    registry = CollectorRegistry()
    registry.register(StoreCollector(db_store, clock=lambda: NOW))
    return db_store, seeded, registry


def test_collector_names_units_and_values(fleet: tuple[Store, Seeded, CollectorRegistry]) -> None:
    _, _, registry = fleet
    s = _samples(registry)
    node = (("node", SLOW),)
    assert s[("screener_node_read_bytes_per_second", node)] == 21e6
    assert s[("screener_node_write_bytes_per_second", node)] == 3100e6
    assert s[("screener_node_read_latency_p99_seconds", node)] == 1.5
    assert s[("screener_node_last_probe_age_seconds", node)] == 7200
    assert s[("screener_node_verdict", (("node", SLOW), ("verdict", "SLOW_READ")))] == 1
    assert s[("screener_node_drained_by_screener", node)] == 1
    assert s[("screener_node_drained_by_screener", (("node", "node01"),))] == 0
    verdict_series = [k for k in s if k[0] == "screener_node_verdict"]
    assert len(verdict_series) == len(NODES)  # one labelled series per node, not a state-set
    assert s[("screener_runs_total", (("status", "done"), ("trigger", "prolog")))] == 1
    assert s[("screener_runs_total", (("status", "failed"), ("trigger", "sweep")))] == 0
    assert s[("screener_drains_total", ())] == 2 and s[("screener_resumes_total", ())] == 1
    assert s[("screener_guard_trips_total", ())] == 1
    assert s[("screener_drain_failures_total", ())] == 1
    assert s[("screener_store_up", ())] == 1


def test_probe_histogram_adds_only_new_probes(
    fleet: tuple[Store, Seeded, CollectorRegistry],
) -> None:
    store, _, registry = fleet
    first = _samples(registry)
    count = first[("screener_probe_duration_seconds_count", ())]
    assert count == 5 * len(NODES) + 4
    # slow probes took 31 s (3 of them), healthy ones 9.25 s, the unreachable one 0.5 s
    assert first[("screener_probe_duration_seconds_bucket", (("le", "30.0"),))] == count - 3
    assert first[("screener_probe_duration_seconds_bucket", (("le", "10.0"),))] == count - 3
    assert first[("screener_probe_duration_seconds_bucket", (("le", "5.0"),))] == 1
    assert first[("screener_probe_duration_seconds_bucket", (("le", "1.0"),))] == 1
    run = store.start_run(Trigger.MANUAL, ["node01"], {}, None, "node01", NOW)
    store.record_probe(run, full_probe("node01"), 1)
    again = _samples(registry)
    assert again[("screener_probe_duration_seconds_count", ())] == count + 1
    assert again[("screener_probe_duration_seconds_sum", ())] == pytest.approx(
        first[("screener_probe_duration_seconds_sum", ())] + 9.25
    )
    assert _samples(registry)[("screener_probe_duration_seconds_count", ())] == count + 1


def test_node_figures_follow_new_rows_and_ages_follow_the_clock(db_store: Store) -> None:
    """Per-node figures are reused between scrapes only while nothing was added; the age of
    the last probe moves with the clock even while they are reused."""
    seed_fleet(db_store, NOW)
    now = [NOW]
    registry = CollectorRegistry()
    registry.register(StoreCollector(db_store, clock=lambda: now[0], reuse_s=3600))
    node01 = (("node", "node01"),)
    first = _samples(registry)
    assert first[("screener_node_read_bytes_per_second", node01)] == 2900e6
    assert first[("screener_node_last_probe_age_seconds", node01)] == 7200
    now[0] = NOW + timedelta(seconds=100)
    assert _samples(registry)[("screener_node_last_probe_age_seconds", node01)] == 7300
    _one_run(db_store, Trigger.MANUAL, ["node01"], NOW, {"node01": Status.SLOW_READ})
    after_run = _samples(registry)
    assert after_run[("screener_node_read_bytes_per_second", node01)] == 21e6
    assert after_run[("screener_node_verdict", (*node01, ("verdict", "SLOW_READ")))] == 1
    assert after_run[("screener_node_last_probe_age_seconds", node01)] == 100
    assert after_run[("screener_node_drained_by_screener", node01)] == 0
    db_store.record_event("node01", "drain", "slow", NOW, slurm_reason="screener: slow")
    db_store.record_event("node77", "resume", "new node", NOW)  # a node with no verdict yet
    after_events = _samples(registry)
    assert after_events[("screener_node_drained_by_screener", node01)] == 1
    assert after_events[("screener_node_drained_by_screener", (("node", "node77"),))] == 0
    assert ("screener_node_last_probe_age_seconds", (("node", "node77"),)) not in after_events


def test_trend_gauges_are_the_stored_marks_never_a_fit(db_store: Store) -> None:
    """The forecasts served are the marks the sweep stored after its run: none before (a
    scrape never fits), the DECLINING node's once stored, and none once that mark is older
    than [trend] since_days (no sweep has reached the node since: its series is gone)."""
    last = NOW - timedelta(hours=20)
    run = seed_declining(db_store, last)
    clock = [NOW]
    registry = CollectorRegistry()
    registry.register(StoreCollector(db_store, clock=lambda: clock[0]))

    def trend() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            k: v for k, v in _samples(registry).items() if k[0].startswith("screener_node_trend")
        }

    assert trend() == {}  # eight sweeps, no marks stored yet: nothing fitted at the scrape
    fitted = refresh_marks(db_store, Policy(), last + timedelta(minutes=10), None, run)
    (warned,) = [v for v in fitted if v.status is TrendStatus.DECLINING]
    key = (("figure", "seq read"), ("node", DECLINING))
    assert trend() == {
        ("screener_node_trend_days_to_slow_line", key): warned.days_to_cross,
        ("screener_node_trend_sweeps_to_slow_line", key): warned.sweeps_to_cross,
    }
    assert 0 < (warned.days_to_cross or 0) < 14
    clock[0] = last + timedelta(days=91)  # [trend] since_days 90
    assert trend() == {}
    short = CollectorRegistry()
    short.register(
        StoreCollector(
            db_store, clock=lambda: NOW, policy=Policy(trend=TrendPolicy(since_days=0.1))
        )
    )
    assert not [k for k in _samples(short) if k[0].startswith("screener_node_trend")]


def test_store_failure_is_store_up_zero() -> None:
    """The database went away after the exporter started (nothing listens on port 1)."""
    from screener.store.engine import make_engine

    store = Store(make_engine("postgresql+psycopg://screener@127.0.0.1:1/screener"))
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    assert _samples(registry) == {("screener_store_up", ()): 0.0}
    store.close()


def test_textfile_is_written_atomically_and_readable(
    fleet: tuple[Store, Seeded, CollectorRegistry], tmp_path: Path
) -> None:
    _, _, registry = fleet
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    out = textdir / "screener.prom"
    out.write_text("old\n")
    write_textfile(registry, out)
    text = out.read_text()
    assert "screener_node_read_bytes_per_second" in text and "old" not in text
    assert list(textdir.iterdir()) == [out]  # no temp file left behind
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    with pytest.raises(ConfigError, match="does not exist"):
        write_textfile(registry, tmp_path / "missing" / "x.prom")


def test_textfile_through_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(url)
    with open_store(url) as store:
        seed_fleet(store, NOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env["SCREENER_DATABASE_URL"] = url
    out = tmp_path / "screener.prom"
    res = cli_fork.run(["exporter", "--textfile", str(out)], env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    fams = {f.name for f in text_string_to_metric_families(out.read_text())}
    assert {"screener_node_verdict", "screener_runs", "screener_probe_duration_seconds"} <= fams
    bad = cli_fork.run(["exporter", "--listen", "localhost:x"], env=env, timeout=60)
    assert bad.returncode == 1 and bad.stderr.startswith("screener: error: --listen")
    negative = cli_fork.run(["exporter", "--reuse-seconds", "-1"], env=env, timeout=60)
    assert negative.returncode == 1
    assert negative.stderr.startswith("screener: error: --reuse-seconds must be >= 0")


@pytest.mark.parametrize(
    ("listen", "parsed"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9100", ("::1", 9100))],
)
def test_parse_listen(listen: str, parsed: tuple[str, int]) -> None:
    assert parse_listen(listen) == parsed


@pytest.mark.parametrize("listen", ["9464", "host:9464", "127.0.0.1:0", "127.0.0.1:99999", ":1"])
def test_parse_listen_refuses(listen: str) -> None:
    with pytest.raises(ConfigError, match="--listen"):
        parse_listen(listen)
