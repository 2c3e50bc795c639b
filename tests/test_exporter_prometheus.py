"""A real Prometheus scrapes the exporter fed from seeded runs; the figures arrive in base
units and every PromQL expression of the dashboards returns data."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from accuracy_seed import PARTITION
from admin_seed import NODES, RESUMED, SLOW

if TYPE_CHECKING:  # the module itself is loaded as a plugin below
    from prom_fixtures import Prom

pytest_plugins = ["store_fixtures", "prom_fixtures"]
pytestmark = pytest.mark.postgres

DASHBOARDS = Path(__file__).parent.parent / "dashboards"
# Grafana fills these in; the test uses values that cover the seeded data.
PROM_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$node": SLOW}


def _value(prom: Prom, expr: str) -> float:
    (sample,) = prom.wait_for(expr)
    return float(sample["value"][1])


def test_exporter_figures_in_prometheus(prom: Prom) -> None:
    assert _value(prom, f'screener_node_read_bytes_per_second{{node="{SLOW}"}}') == 21e6
    assert _value(prom, 'screener_node_read_bytes_per_second{node="node01"}') == 2900e6
    assert _value(prom, f'screener_node_read_latency_p99_seconds{{node="{SLOW}"}}') == 1.5
    ratio = _value(prom, f'screener_node_write_read_ratio{{node="{SLOW}"}}')
    assert ratio == pytest.approx(3100 / 21)
    verdicts = prom.wait_for("screener_node_verdict == 1")
    by_node = {s["metric"]["node"]: s["metric"]["verdict"] for s in verdicts}
    assert by_node[SLOW] == "SLOW_READ" and by_node["node05"] == "UNKNOWN"
    assert sorted(by_node) == NODES
    assert _value(prom, f'screener_node_drained_by_screener{{node="{SLOW}"}}') == 1
    assert _value(prom, f'screener_node_drained_by_screener{{node="{RESUMED}"}}') == 0
    age = _value(prom, f'screener_node_last_probe_age_seconds{{node="{SLOW}"}}')
    assert 2 * 3600 <= age < 2 * 3600 + 600
    assert _value(prom, 'sum(screener_runs_total{trigger="sweep",status="done"})') == 5
    assert _value(prom, "screener_drains_total") == 2
    assert _value(prom, "screener_resumes_total") == 1
    assert _value(prom, "screener_guard_trips_total") == 1
    n_probes = len(prom.seeded.sweeps) * len(NODES) + 4
    assert _value(prom, "screener_probe_duration_seconds_count") == n_probes
    assert _value(prom, 'screener_probe_duration_seconds_bucket{le="30.0"}') < n_probes
    assert _value(prom, "screener_store_up") == 1
    part = f'partition="{PARTITION}"'
    assert _value(prom, f'screener_accuracy_nodes{{{part},class="miss"}}') == 1
    assert _value(prom, f'screener_accuracy_nodes{{{part},class="stayed_ok"}}') == 3
    assert _value(prom, f"screener_accuracy_miss_ratio{{{part}}}") == 0.25
    tail = 'rule="peer_tail",mode="shadow"'  # shadowed in the fixture, never fired
    assert _value(prom, f'screener_accuracy_rule_nodes{{{tail},class="misses"}}') == 1
    assert _value(prom, f'screener_accuracy_rule_nodes{{{tail},class="caught"}}') == 0


def _prom_exprs() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for t in panel["targets"]:
                if "expr" in t:
                    out.append((path.name, panel["title"], t["expr"]))
    return out


def test_every_dashboard_promql_returns_data(prom: Prom) -> None:
    exprs = _prom_exprs()
    assert len(exprs) >= 12
    empty = []
    for name, title, expr in exprs:
        for var, value in PROM_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, (name, title, expr)
        if "screener_node_trend_" in expr:  # series only while a node declines, none here (5
            continue  # sweeps, a forecast needs 6): test_dashboards.py runs them over one
        if not prom.wait_for(expr, timeout=30):
            empty.append((name, title, expr))
    assert empty == []
    # every node's latest verdict is at most a day old: the sweep coverage stat is 100 %
    coverage = [e for n, t, e in exprs if t.startswith("Sweep coverage")]
    assert [_value(prom, e) for e in coverage] == [1.0]


def test_alert_rules_evaluate_on_the_exporter(prom: Prom) -> None:
    """deploy/prometheus/screener-rules.yml loaded as is: every rule evaluates without
    error; node03 (drained 2 days ago) fires, node06 (resumed) does not; the spooled run
    and the UNKNOWN share (1 of 8) are pending; the sweep of a day ago raises nothing."""
    firing = prom.wait_for('ALERTS{alertname="ScreenerNodeDrainedTooLong",alertstate="firing"}')
    assert [s["metric"]["node"] for s in firing] == [SLOW]
    for name in ("ScreenerSpoolUnreplayed", "ScreenerBlind"):
        assert prom.wait_for(f'ALERTS{{alertname="{name}",alertstate="pending"}}'), name
    assert _value(prom, "screener_spool_runs") == prom.spooled
    last_sweep = prom.seeded.now.timestamp() - 86400 + 120  # the newest seeded sweep's end
    done = 'screener_last_run_timestamp_seconds{trigger="sweep",status="done"}'
    assert _value(prom, done) == last_sweep
    with urllib.request.urlopen(f"{prom.url}/api/v1/rules", timeout=10) as r:
        groups = json.load(r)["data"]["groups"]
    rules = {rule["name"]: rule for g in groups for rule in g["rules"]}
    assert len(rules) == 10
    assert {n: r["health"] for n, r in rules.items() if r["health"] != "ok"} == {}
    quiet = ("ScreenerSweepMissing", "ScreenerSweepFailed", "ScreenerStoreUnreadable")
    assert all(rules[n]["state"] == "inactive" for n in quiet), [rules[n] for n in quiet]
