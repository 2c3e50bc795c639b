"""The Grafana dashboards: generated files up to date, data source uids provisioned, every
metric a PromQL query reads is one the exporter exports, the early-warning panel lists the
declining node on a real Prometheus, and every SQL query runs on the real PostgreSQL as the
read-only role of deploy/sql and returns rows for seeded runs (the rest of the PromQL side
is in test_exporter_prometheus.py)."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from accuracy_seed import JOB, MISSED, seed_accuracy
from admin_seed import FLAKY, SLOW, seed_fleet
from prom_fixtures import PROMETHEUS, SHADOW, free_port
from prometheus_client import CollectorRegistry
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from trend_seed import DECLINING, seed_declining

from screener.metrics import StoreCollector, serve
from screener.metrics.accuracy import AccuracyCollector
from screener.metrics.collector import TREND_GAUGES
from screener.metrics.ops import OpsCollector
from screener.policy import Policy, StorePolicy
from screener.store import Store, open_store
from screener.store.migrate import upgrade
from screener.store.trend_marks import refresh_marks
from screener.verdict.trend import TrendStatus

pytest_plugins = ["store_fixtures"]

ROOT = Path(__file__).parent.parent
DASHBOARDS = ROOT / "dashboards"
# Grafana's macros and our variables, expanded as Grafana would for "last 30 days".
SQL_VARS = {"$node": SLOW, "$min_episodes": "2"}
TIME_FILTER = re.compile(r"\$__timeFilter\(([^)]+)\)")


def _targets() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path.name, panel["title"], t)
        for path in sorted(DASHBOARDS.glob("*.json"))
        for panel in json.loads(path.read_text())["panels"]
        for t in panel["targets"]
    ]


def _expand(sql: str) -> str:
    sql = TIME_FILTER.sub(r"\1 BETWEEN now() - interval '30 days' AND now()", sql)
    for var, value in SQL_VARS.items():
        sql = sql.replace(var, value)
    assert "$" not in sql, sql
    return sql


def test_dashboard_files_are_built_from_build_py() -> None:
    sys.path.insert(0, str(DASHBOARDS))
    try:
        import build  # dashboards/build.py
    finally:
        sys.path.pop(0)
    rendered = build.render()
    assert sorted(rendered) == sorted(p.name for p in DASHBOARDS.glob("*.json"))
    for name, text_ in rendered.items():
        assert (DASHBOARDS / name).read_text() == text_, (
            f"run `python dashboards/build.py` ({name})"
        )


def test_dashboards_use_the_provisioned_data_sources() -> None:
    prov = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/screener.yaml").read_text()
    )
    provisioned = {(d["type"], d["uid"]) for d in prov["datasources"]}
    used = {(t["datasource"]["type"], t["datasource"]["uid"]) for _, _, t in _targets()}
    assert used == provisioned
    titles = {json.loads(p.read_text())["title"] for p in DASHBOARDS.glob("*.json")}
    assert titles == {
        "screener: fleet overview",
        "screener: node detail",
        "screener: flaky nodes",
    }


# ---- PromQL: the metrics the exporter exports --------------------------------------------

METRIC = re.compile(r"\bscreener_[a-z0-9_]+\b")
TREND_TITLE = "Declining nodes: forecast to the slow line"


def _promql() -> list[tuple[str, str, str]]:
    """(file, panel or variable, PromQL) of every dashboard: targets and query variables."""
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        doc = json.loads(path.read_text())
        out += [
            (path.name, p["title"], t["expr"])
            for p in doc["panels"]
            for t in p["targets"]
            if "expr" in t  # PromQL, not SQL
        ]
        out += [
            (path.name, f"${v['name']}", v["definition"])
            for v in doc["templating"]["list"]
            if v.get("datasource", {}).get("type") == "prometheus"
        ]
    return out


def _trend_panel() -> dict[str, Any]:
    (panel,) = [
        p
        for p in json.loads((DASHBOARDS / "screener-fleet.json").read_text())["panels"]
        if p["title"].startswith(TREND_TITLE)
    ]
    return dict(panel)


def _registry(store: Store, spool: Path) -> CollectorRegistry:
    """The collectors `screener exporter` registers, as prom_fixtures registers them."""
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    registry.register(AccuracyCollector(store, shadow=SHADOW))
    registry.register(OpsCollector(store, Policy(store=StorePolicy(spool_dir=str(spool)))))
    return registry


def test_every_promql_metric_is_one_the_exporter_exports(tmp_path: Path) -> None:
    """Each ``screener_*`` name in the dashboards' PromQL is a sample the exporter's
    collectors yield over seeded stores: the admin fleet with an ingested job, and sweeps
    with a declining node (the trend gauges have series only then). A renamed or misspelt
    metric would leave its panel empty for ever; this names it."""
    exported: set[str] = set()
    now = datetime.now(UTC).replace(microsecond=0)
    for name, seed in (("fleet", "admin"), ("trend", "trend")):
        url = f"sqlite:///{tmp_path / name}.db"
        upgrade(url)
        with open_store(url) as store:
            if seed == "admin":
                seed_fleet(store, now)
                seed_accuracy(store, now)
            else:  # the sweeps, then the marks the sweep job stores after its run
                run = seed_declining(store, now - timedelta(hours=20))
                refresh_marks(store, Policy(), now, None, run)
            exported |= {s.name for m in _registry(store, tmp_path).collect() for s in m.samples}
    used = {(f, where, m) for f, where, expr in _promql() for m in METRIC.findall(expr)}
    assert len({m for *_, m in used}) >= 15
    assert sorted(x for x in used if x[2] not in exported) == []
    trend = {m for t in _trend_panel()["targets"] for m in METRIC.findall(t["expr"])}
    assert trend == {name for name, _ in TREND_GAUGES} and trend <= exported


@contextlib.contextmanager
def _prometheus(registry: CollectorRegistry, tmp: Path) -> Iterator[str]:
    """``registry`` served over HTTP and a real Prometheus (Debian package) scraping it
    every second; yields Prometheus' URL once it has scraped the exporter."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is not installed: `make apt` (Debian package prometheus)")
    exporter = f"127.0.0.1:{free_port()}"
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(registry, exporter, stop), daemon=True)
    server.start()
    config = tmp / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: screener\n    static_configs: [{{targets: ['{exporter}']}}]\n"
    )
    url = f"http://127.0.0.1:{free_port()}"
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address={url.removeprefix('http://')}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # ready = the API answers and the exporter has been scraped
            with contextlib.suppress(OSError):
                if _query(url, 'up{job="screener"} == 1'):
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"prometheus not ready: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        stop.set()
        server.join(timeout=10)


def _query(url: str, expr: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def test_the_trend_panel_lists_the_declining_node_on_a_real_prometheus(tmp_path: Path) -> None:
    """The early-warning table's two instant queries, as Grafana sends them, on a real
    Prometheus scraping the exporter over sweeps where node01 declines beside three steady
    peers: one row each, node01's seq read, with the forecast the sweep stored (as
    `screener trend` fits it)."""
    url = f"sqlite:///{tmp_path / 'trend.db'}"
    upgrade(url)
    panel = _trend_panel()
    assert panel["type"] == "table" and [t["refId"] for t in panel["targets"]] == ["A", "B"]
    assert all(t["instant"] and t["format"] == "table" for t in panel["targets"])
    with open_store(url) as store:
        run = seed_declining(store, datetime.now(UTC) - timedelta(hours=20))
        (warned,) = [  # what the sweep job stores after its run: the exporter reads it
            v
            for v in refresh_marks(store, Policy(), datetime.now(UTC), None, run)
            if v.status is TrendStatus.DECLINING
        ]
        registry = CollectorRegistry()
        registry.register(StoreCollector(store))
        with _prometheus(registry, tmp_path) as prom:
            answers = [_query(prom, t["expr"]) for t in panel["targets"]]
    assert (warned.node, warned.figure) == (DECLINING, "seq read")
    for answer, figure in zip(answers, (warned.days_to_cross, warned.sweeps_to_cross), strict=True):
        assert [(s["metric"]["node"], s["metric"]["figure"]) for s in answer] == [
            (DECLINING, "seq read")
        ], answer
        assert float(answer[0]["value"][1]) == pytest.approx(figure, rel=1e-9)


# ---- SQL: every query as the read-only role ---------------------------------------------


@pytest.fixture
def readonly(pg_dbs: Any, pg_template: str) -> Iterator[str]:
    """A seeded database and the URL of a read-only role made by deploy/sql/readonly_role.sql."""
    url = pg_dbs.create(template=pg_template)
    with open_store(url) as store:
        now = datetime.now(UTC).replace(microsecond=0)
        seed_fleet(store, now)
        seed_accuracy(store, now)  # a screened, ingested job: the accuracy/in-job panels
    role = f"screener_ro_{secrets.token_hex(4)}"
    parsed = make_url(url)
    libpq = f"postgresql://{parsed.username}@{parsed.host}:{parsed.port}/{parsed.database}"
    subprocess.run(
        [
            *("psql", "-q", "-v", "ON_ERROR_STOP=1", "-v", f"ro_role={role}"),
            *("-v", "ro_password=test-only", "-f", str(ROOT / "deploy/sql/readonly_role.sql")),
            libpq,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        yield parsed.set(username=role).render_as_string(hide_password=False)
    finally:
        # the role holds privileges in that database only: drop the database, then the role
        name = parsed.database or ""
        pg_dbs._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        pg_dbs.created.remove(name)
        admin = create_engine(pg_dbs.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


@pytest.mark.postgres
def test_every_dashboard_sql_returns_rows_as_the_readonly_role(readonly: str) -> None:
    engine = create_engine(readonly)
    sqls = [(n, title, t["rawSql"]) for n, title, t in _targets() if "rawSql" in t]
    assert len(sqls) >= 6
    try:
        with engine.connect() as conn:
            assert (
                conn.scalar(text("SELECT current_setting('default_transaction_read_only')")) == "on"
            )
            for name, title, sql in sqls:
                rows = conn.execute(text(_expand(sql))).all()
                assert rows, (name, title)
                if title == "Flaky nodes":
                    assert rows[0].node == FLAKY and rows[0].episodes == 3
                if title.startswith("Jobs dragged down"):
                    assert [(r.job, r[-1]) for r in rows] == [(JOB, MISSED)]
                if title.startswith("Sweep reach"):  # swept a day ago, all eight
                    assert len(rows) == 8 and {r[-1] for r in rows} == {"yes"}
                    assert all(23.9 <= float(r[2]) <= 24.1 for r in rows), rows
            conn.rollback()
            with pytest.raises(DBAPIError, match=r"read-only|permission denied"):
                conn.execute(text("DELETE FROM episodes"))
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_exporter_reads_everything_as_the_readonly_role(readonly: str, tmp_path: Path) -> None:
    """deploy/systemd/screener-exporter.service logs in as this role: every collector of
    `screener exporter` reads its families through it (none writes)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from screener.metrics import StoreCollector
    from screener.metrics.accuracy import AccuracyCollector
    from screener.metrics.ops import OpsCollector
    from screener.policy import Policy, StorePolicy

    with open_store(readonly, readonly=True) as store:
        registry = CollectorRegistry()
        registry.register(StoreCollector(store))
        registry.register(AccuracyCollector(store))
        registry.register(OpsCollector(store, Policy(store=StorePolicy(spool_dir=str(tmp_path)))))
        text_ = generate_latest(registry).decode()
    assert "screener_store_up 1.0" in text_
    assert f'screener_node_drained_since_timestamp_seconds{{node="{SLOW}"}}' in text_
    assert 'screener_last_run_timestamp_seconds{status="done",trigger="sweep"}' in text_
    assert "screener_accuracy_miss_ratio{" in text_
