"""The Grafana dashboards: generated files up to date, data source uids provisioned, and
every SQL query runs on the real PostgreSQL as the read-only role of deploy/sql and returns
rows for seeded runs (the PromQL side is in test_exporter_prometheus.py)."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from accuracy_seed import JOB, MISSED, seed_accuracy
from admin_seed import FLAKY, SLOW, seed_fleet
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from screener.store import open_store

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
