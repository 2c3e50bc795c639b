"""Build screener's Grafana dashboards as plain JSON: `python dashboards/build.py` writes
dashboards/*.json; tests/test_dashboards.py checks the files are up to date and runs every
query in them (PromQL on a real Prometheus, SQL on PostgreSQL as the read-only role).

Why a small script and not grafana-foundation-sdk: the SDK is versioned per Grafana release
and pulls a large generated package into the dev environment for three dashboards; plain
dicts keep the queries readable in review, and the test, not the SDK's types, is what proves
each query returns data.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PROM = {"type": "prometheus", "uid": "screener-prometheus"}  # provisioned uids (deploy/grafana)
PG = {"type": "grafana-postgresql-datasource", "uid": "screener-postgres"}
SLOW_RE = "SLOW_READ|SLOW_WRITE"

Panel = dict[str, Any]


def _pos(x: int, y: int, w: int, h: int) -> dict[str, int]:
    return {"x": x, "y": y, "w": w, "h": h}


def _red_from(value: float) -> dict[str, Any]:
    """Thresholds: green below ``value``, red from it (a stat that should stay at zero)."""
    return {
        "mode": "absolute",
        "steps": [{"color": "green", "value": None}, {"color": "red", "value": value}],
    }


def prom_panel(
    kind: str,
    title: str,
    exprs: dict[str, str],
    pos: dict[str, int],
    unit: str = "short",
    red_from: float | None = None,
    options: dict[str, Any] | None = None,
) -> Panel:
    """A panel over Prometheus; ``exprs`` maps legend -> PromQL."""
    defaults: dict[str, Any] = {"unit": unit}
    if red_from is not None:
        defaults["thresholds"] = _red_from(red_from)
    return {
        "type": kind,
        "title": title,
        "datasource": PROM,
        "gridPos": pos,
        "options": options or {},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "targets": [
            {"refId": chr(65 + i), "datasource": PROM, "expr": e, "legendFormat": legend}
            for i, (legend, e) in enumerate(exprs.items())
        ],
    }


def sql_panel(kind: str, title: str, sql: str, pos: dict[str, int], fmt: str = "table") -> Panel:
    """A panel over PostgreSQL (raw SQL, Grafana macros such as $__timeFilter allowed)."""
    return {
        "type": kind,
        "title": title,
        "datasource": PG,
        "gridPos": pos,
        "targets": [
            {
                "refId": "A",
                "datasource": PG,
                "editorMode": "code",
                "rawQuery": True,
                "format": fmt,
                "rawSql": " ".join(sql.split()),
            }
        ],
    }


def dashboard(uid: str, title: str, panels: list[Panel], variables: list[Any]) -> dict[str, Any]:
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "uid": uid,
        "title": title,
        "tags": ["screener"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "1m",
        "time": {"from": "now-7d", "to": "now"},
        "templating": {"list": variables},
        "panels": panels,
    }


def fleet() -> dict[str, Any]:
    """Fleet overview: what is slow, unknown or drained now; drains over time; read spread."""
    stat = "stat"
    panels = [
        prom_panel(
            stat,
            "Slow nodes now",
            {"slow": f'count(screener_node_verdict{{verdict=~"{SLOW_RE}"}} == 1) or vector(0)'},
            _pos(0, 0, 6, 4),
            red_from=1,
        ),
        prom_panel(
            stat,
            "Unknown nodes now",
            {"unknown": 'count(screener_node_verdict{verdict="UNKNOWN"} == 1) or vector(0)'},
            _pos(6, 0, 6, 4),
            red_from=1,
        ),
        prom_panel(
            stat,
            "Drained by screener",
            {"drained": "sum(screener_node_drained_by_screener)"},
            _pos(12, 0, 6, 4),
        ),
        prom_panel(
            stat,
            "Results store reachable",
            {"up": "min(screener_store_up)"},
            _pos(18, 0, 6, 4),
            options={"colorMode": "background"},
        ),
        prom_panel(
            "timeseries",
            "Drains, resumes and guard trips",
            {
                "drains": "increase(screener_drains_total[$__rate_interval])",
                "resumes": "increase(screener_resumes_total[$__rate_interval])",
                "guard trips": "increase(screener_guard_trips_total[$__rate_interval])",
            },
            _pos(0, 4, 12, 8),
        ),
        prom_panel(
            "timeseries",
            "Nodes by latest verdict",
            {"{{verdict}}": "count by (verdict) (screener_node_verdict == 1)"},
            _pos(12, 4, 12, 8),
        ),
        sql_panel(
            "timeseries",
            "Read bandwidth across nodes, per run (MB/s)",
            """
            SELECT r.started_at AS time,
              min(v.read_mb_s) AS "min",
              percentile_cont(0.1) WITHIN GROUP (ORDER BY v.read_mb_s) AS "p10",
              percentile_cont(0.5) WITHIN GROUP (ORDER BY v.read_mb_s) AS "median",
              percentile_cont(0.9) WITHIN GROUP (ORDER BY v.read_mb_s) AS "p90"
            FROM runs r JOIN verdicts v ON v.run_id = r.id
            WHERE $__timeFilter(r.started_at) AND v.read_mb_s IS NOT NULL
            GROUP BY r.id, r.started_at ORDER BY 1
            """,
            _pos(0, 12, 12, 8),
            fmt="time_series",
        ),
        prom_panel(
            "histogram",
            "Latest read bandwidth, all nodes",
            {"read": "screener_node_read_bytes_per_second"},
            _pos(12, 12, 12, 8),
            unit="Bps",
        ),
        prom_panel(
            "timeseries",
            "Mean probe duration",
            {"mean": "screener_probe_duration_seconds_sum / screener_probe_duration_seconds_count"},
            _pos(0, 20, 12, 6),
            unit="s",
        ),
        prom_panel(
            "bargauge",
            "Screening accuracy, last 30 days: nodes passed by the prolog",
            {
                "{{partition}} missed (in-job outlier)": (
                    'sum by (partition) (screener_accuracy_nodes{class="miss"})'
                ),
                "{{partition}} stayed OK": (
                    'sum by (partition) (screener_accuracy_nodes{class="stayed_ok"})'
                ),
                "{{partition}} miss rate %": "100 * screener_accuracy_miss_ratio",
            },
            _pos(12, 20, 12, 6),
            options={"displayMode": "basic", "orientation": "horizontal"},
        ),
        sql_panel(
            "table",
            "Jobs dragged down by one node (ingested in-job figures)",
            """
            SELECT i.observed_at AS "time", i.job_id AS job, i.partition,
              (SELECT round(min(w.ratio)::numeric, 2) FROM job_results w
                WHERE w.ingest_id = i.id AND w.node_id IS NULL AND w.phase = 'read')
                AS "read: median node / slowest",
              (SELECT string_agg(DISTINCT n.name, ',') FROM job_results o
                JOIN nodes n ON n.id = o.node_id
                WHERE o.ingest_id = i.id AND o.outlier AND o.phase = 'read')
                AS "in-job slow nodes"
            FROM job_ingests i
            WHERE $__timeFilter(i.observed_at)
              AND EXISTS (SELECT 1 FROM job_results x WHERE x.ingest_id = i.id AND x.outlier)
            ORDER BY i.observed_at DESC LIMIT 50
            """,
            _pos(0, 26, 24, 8),
        ),
        *coverage_panels(34),
        trend_panel(42),
    ]
    return dashboard("screener-fleet", "screener: fleet overview", panels, [])


def coverage_panels(y: int) -> list[Panel]:
    """Does the sweep reach every node (a node never idle is never swept), and how good is
    each verdict rule, shadowed or not (issue 23). The reach table reads each node's newest
    sweep verdict by the (node_id, started_at) index, LIMIT 1: no scan of all verdicts."""
    rule = "screener_accuracy_rule_nodes"
    return [
        prom_panel(
            "stat",
            "Sweep coverage: nodes with a verdict younger than 26 h",
            {
                "covered": "(count(screener_node_last_probe_age_seconds < 26 * 3600) or vector(0))"
                " / count(screener_node_drained_by_screener)"
            },
            _pos(0, y, 6, 8),
            unit="percentunit",
        ),
        sql_panel(
            "table",
            "Sweep reach per node, least recently swept first (never = never idle at a sweep)",
            """
            SELECT n.name AS node, s.at AS "last sweep verdict",
              round((EXTRACT(EPOCH FROM now() - s.at) / 3600)::numeric, 1) AS "hours ago",
              CASE WHEN s.at > now() - interval '26 hours' THEN 'yes' ELSE 'no'
                END AS "reached in 26 h"
            FROM nodes n
            LEFT JOIN LATERAL (
              SELECT v.started_at AS at FROM verdicts v JOIN runs r ON r.id = v.run_id
              WHERE v.node_id = n.id AND r.trigger IN ('sweep', 'rolling')
              ORDER BY v.started_at DESC LIMIT 1
            ) s ON true
            ORDER BY s.at ASC NULLS FIRST, n.name LIMIT 100
            """,
            _pos(6, y, 8, 8),
        ),
        prom_panel(
            "bargauge",
            "Per-rule record, last 30 days (a shadowed rule drains nobody: its nodes are scored)",
            {
                "{{rule}} ({{mode}}) caught": f'{rule}{{class="caught"}}',
                "{{rule}} ({{mode}}) false alarms": f'{rule}{{class="false_alarms"}}',
                "{{rule}} ({{mode}}) missed": f'{rule}{{class="misses"}}',
                "{{rule}} ({{mode}}) drained, unknowable": f'{rule}{{class="drained"}}',
            },
            _pos(14, y, 10, 8),
            options={"displayMode": "basic", "orientation": "horizontal"},
        ),
    ]


TREND_DAYS = "screener_node_trend_days_to_slow_line"  # screener/metrics/collector.py
TREND_SWEEPS = "screener_node_trend_sweeps_to_slow_line"


def trend_panel(y: int) -> Panel:
    """Early warning (issue 46): each DECLINING node and figure with its forecast in days and
    in sweeps to the slow line, soonest first, one row each (the two instant queries merged on
    their labels). The gauges have a series only while a node declines: an empty table is a
    fleet without a warning. A warning: screener drains nobody for it."""
    panel = prom_panel(
        "table",
        "Declining nodes: forecast to the slow line (early warning, nobody is drained)",
        {"days": f"sort({TREND_DAYS})", "sweeps": TREND_SWEEPS},
        _pos(0, y, 24, 8),
        options={"showHeader": True, "cellHeight": "sm"},
    )
    for target in panel["targets"]:
        target |= {"instant": True, "range": False, "format": "table"}
    panel["fieldConfig"]["defaults"]["decimals"] = 1
    panel["transformations"] = [
        {"id": "merge", "options": {}},
        {"id": "sortBy", "options": {"sort": [{"field": "Value #A", "desc": False}]}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "instance": True, "job": True},
                "indexByName": {"node": 0, "figure": 1, "Value #A": 2, "Value #B": 3},
                "renameByName": {
                    "Value #A": "days to the slow line",
                    "Value #B": "sweeps to the slow line",
                },
            },
        },
    ]
    return panel


def node() -> dict[str, Any]:
    """One node: read/write/p99 history, its episodes and the facts of its latest probe."""
    node_var = {
        "name": "node",
        "type": "query",
        "datasource": PROM,
        "query": {"query": "label_values(screener_node_verdict, node)", "refId": "node"},
        "definition": "label_values(screener_node_verdict, node)",
        "refresh": 2,
        "sort": 1,
    }
    nid = "(SELECT id FROM nodes WHERE name = '$node')"
    panels = [
        prom_panel(
            "stat",
            "Latest read / write",
            {
                "read": 'screener_node_read_bytes_per_second{node="$node"}',
                "write": 'screener_node_write_bytes_per_second{node="$node"}',
            },
            _pos(0, 0, 8, 4),
            unit="Bps",
        ),
        prom_panel(
            "stat",
            "Last probe age",
            {"age": 'screener_node_last_probe_age_seconds{node="$node"}'},
            _pos(8, 0, 4, 4),
            unit="s",
        ),
        prom_panel(
            "stat",
            "Drained by screener",
            {"drained": 'screener_node_drained_by_screener{node="$node"}'},
            _pos(12, 0, 4, 4),
            red_from=1,
        ),
        prom_panel(
            "stat",
            "Latest verdict",
            {"{{verdict}}": 'screener_node_verdict{node="$node"} == 1'},
            _pos(16, 0, 8, 4),
            options={"textMode": "name"},  # show the verdict label, not the value 1
        ),
        sql_panel(
            "timeseries",
            "Read and write bandwidth (MB/s)",
            f"""
            SELECT started_at AS time, read_mb_s AS "read", write_mb_s AS "write"
            FROM verdicts WHERE node_id = {nid} AND $__timeFilter(started_at)
              AND read_mb_s IS NOT NULL ORDER BY 1
            """,
            _pos(0, 4, 12, 8),
            fmt="time_series",
        ),
        sql_panel(
            "timeseries",
            "Read p99 latency (ms)",
            f"""
            SELECT started_at AS time, read_p99_ms AS "read p99"
            FROM verdicts WHERE node_id = {nid} AND $__timeFilter(started_at)
              AND read_p99_ms IS NOT NULL ORDER BY 1
            """,
            _pos(12, 4, 12, 8),
            fmt="time_series",
        ),
        sql_panel(
            "table",
            "Slow episodes",
            f"""
            SELECT started_at, ended_at, "trigger", job_id, reason,
              extract(epoch FROM coalesce(ended_at, now()) - started_at) AS duration_s
            FROM episodes WHERE node_id = {nid} AND $__timeFilter(started_at)
            ORDER BY started_at DESC
            """,
            _pos(0, 12, 12, 8),
        ),
        sql_panel(
            "table",
            "Verdicts",
            f"""
            SELECT v.started_at, r."trigger", v.status, v.read_mb_s, v.write_mb_s, v.ratio,
              v.reason
            FROM verdicts v JOIN runs r ON r.id = v.run_id
            WHERE v.node_id = {nid} AND $__timeFilter(v.started_at)
            ORDER BY v.started_at DESC LIMIT 100
            """,
            _pos(12, 12, 12, 8),
        ),
        sql_panel(
            "table",
            "Facts of the latest probe",
            f"""
            SELECT f.device, f.pcie_speed, f.pcie_max_speed, f.pcie_width, f.pcie_max_width,
              f.scheduler, f.read_ahead_kb, f.nr_requests, f.write_cache,
              f.smart_temperature_c, f.smart_media_errors, f.smart_critical_warning
            FROM node_facts f JOIN node_probes p ON p.id = f.node_probe_id
            WHERE p.node_id = {nid} ORDER BY p.id DESC LIMIT 1
            """,
            _pos(0, 20, 24, 4),
        ),
    ]
    return dashboard("screener-node", "screener: node detail", panels, [node_var])


def flaky() -> dict[str, Any]:
    """Nodes with repeated slow episodes in the dashboard's time range, worst first."""
    min_var = {
        "name": "min_episodes",
        "type": "custom",
        "query": "1,2,3,5",
        "current": {"text": "2", "value": "2"},
        "options": [],
    }
    sql = """
        SELECT n.name AS node, count(*) AS episodes,
          count(*) FILTER (WHERE e."trigger" = 'prolog') AS prolog,
          count(*) FILTER (WHERE e."trigger" IN ('sweep', 'rolling')) AS sweep,
          count(*) FILTER (WHERE e."trigger" = 'job') AS in_job,
          min(e.started_at) AS first_seen,
          max(coalesce(e.ended_at, e.started_at)) AS last_seen,
          bool_or(e.ended_at IS NULL) AS still_slow,
          percentile_cont(0.5) WITHIN GROUP
            (ORDER BY extract(epoch FROM e.ended_at - e.started_at)) AS ttr_median_s,
          max(extract(epoch FROM e.ended_at - e.started_at)) AS ttr_max_s
        FROM episodes e JOIN nodes n ON n.id = e.node_id
        WHERE $__timeFilter(e.started_at)
        GROUP BY n.name HAVING count(*) >= $min_episodes
        ORDER BY episodes DESC,
          sum(extract(epoch FROM coalesce(e.ended_at, now()) - e.started_at)) DESC, node
    """
    panels = [sql_panel("table", "Flaky nodes", sql, _pos(0, 0, 24, 14))]
    return dashboard("screener-flaky", "screener: flaky nodes", panels, [min_var])


DASHBOARDS = {
    "screener-fleet.json": fleet,
    "screener-node.json": node,
    "screener-flaky.json": flaky,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def main() -> int:
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote dashboards/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
