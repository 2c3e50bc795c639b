"""`screener nodes` marks declining nodes (issue 46): over real stores (SQLite and the real
PostgreSQL) seeded with sweeps whose reads are this machine's captured healthy ratios
(tests/data/trend/bench_healthy_round1.json), one node's falling a few percent a sweep.
The mark is a warning: the node's status stays its verdict and it needs a look."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from trend_seed import HEALTHY, NAMES, seed_declining

from screener.cli.admin import declining_lines, needs_a_look, nodes_summary
from screener.policy import Policy
from screener.probe_data import Status
from screener.store import Store, open_store, views
from screener.store.query_rows import NodeRow
from screener.store.trend import node_trends
from screener.verdict.trend import Point, TrendStatus, declining

pytest_plugins = ["store_fixtures"]  # db_store: SQLite and the real PostgreSQL

DATE = re.compile(r"\(~(\d{4}-\d\d-\d\d)\)$")  # the forecast date ending `trend`'s words
STALE_S = 2 * 86400.0


def _forecast(cell: str | None) -> str:
    """The cell if it is a forecast as `nodes` shows it ('~9d', '<1d'), else ''."""
    return cell if cell and re.fullmatch(r"~\d+d|<1d", cell) else ""


def test_nodes_marks_the_declining_node_only_and_keeps_its_status(db_store: Store) -> None:
    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    seed_declining(db_store, last)
    now = last + timedelta(hours=6)
    rows = {r.node: r for r in views.node_overview(db_store, now, Policy())}
    trends = node_trends(db_store, Policy(), now)
    (warned,) = [v for v in trends if v.status is TrendStatus.DECLINING]
    one = rows["node01"]
    assert one.status is Status.OK and not one.drained_by_screener  # a warning, not a verdict
    assert one.declining == warned.reason.removeprefix("node01: "), one.declining  # trend's
    assert one.declining.startswith("seq read 0.")
    assert warned.crosses_at is not None and now < warned.crosses_at < now + timedelta(days=14)
    assert one.declining.endswith(f"(~{warned.crosses_at:%Y-%m-%d})")
    days = (warned.crosses_at - now) / timedelta(days=1)
    assert one.slow_in == (f"~{days:.0f}d" if days >= 1 else "<1d") == _forecast(one.slow_in)
    for steady in NAMES[1:]:
        assert rows[steady].declining is None and rows[steady].slow_in is None
    assert [n for n, r in rows.items() if needs_a_look(r, STALE_S)] == ["node01"]
    assert nodes_summary(list(rows.values()), STALE_S) == (
        "4 nodes: 4 OK; 0 drained by screener; 0 stale; 1 declining"
    )
    assert declining_lines(list(rows.values())) == [f"node01 declining: {one.declining}"]
    # without a policy (the exporter's and the bench's path) nothing is fitted or marked
    plain = views.node_overview(db_store, now)
    assert all(r.declining is None for r in plain) and not any(
        needs_a_look(r, STALE_S) for r in plain
    )


def test_a_fleet_wide_fall_marks_nobody(db_store: Store) -> None:
    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    seed_declining(db_store, last, fleet_fall=True)
    rows = views.node_overview(db_store, last + timedelta(hours=6), Policy())
    assert [r.declining for r in rows] == [None] * 4
    assert "declining" not in nodes_summary(rows, STALE_S)


def test_two_falling_figures_give_the_soonest_crossing_first() -> None:
    """Pure: node01's seq read and random read both fall (real noise, made trends); the
    random read, falling faster toward its own line, crosses first and leads."""
    t0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)

    def points(ratios: list[float], rate: float) -> list[Point]:
        return [Point(t0 + timedelta(days=k), r * rate**k, "r1") for k, r in enumerate(ratios)]

    seq = declining("node01", points(HEALTHY[0][:8], 0.95), 0.5, timedelta(days=14))
    rand = declining(
        "node01", points(HEALTHY[1][:8], 0.88), 0.25, timedelta(days=14), figure="rand read"
    )
    assert seq.status is rand.status is TrendStatus.DECLINING, (seq.reason, rand.reason)
    assert rand.days_to_cross is not None and seq.days_to_cross is not None
    assert rand.days_to_cross < seq.days_to_cross
    steady = declining("node02", points(HEALTHY[2][:8], 1.0), 0.5, timedelta(days=14))
    assert steady.status is TrendStatus.STEADY
    blank = dict.fromkeys(("read_mb_s", "write_mb_s", "ratio", "read_p99_ms", "age_s"))
    one = NodeRow(
        node="node01", status=Status.OK, reason="ok", run_id=1, last_probe_at=t0,
        drained_by_screener=False, drained_at=None, drain_reason=None, **blank,
    )  # fmt: skip
    rows = [one, replace(one, node="node02")]
    now = t0 + timedelta(days=7, hours=1)  # an hour after the newest sweep
    marked = views.mark_declining(rows, [seq, rand, steady], now)
    words = marked[0].declining or ""
    assert words.split(" | ") == [
        rand.reason.removeprefix("node01: "),
        seq.reason.removeprefix("node01: "),
    ], words
    assert marked[0].slow_in == views.forecast_in(rand.crosses_at, now) == "~4d"  # 3.6 days
    assert views.forecast_in(now + timedelta(hours=20), now) == "<1d"
    assert views.forecast_in(now - timedelta(hours=2), now) == "<1d"  # due: sweep it now
    assert views.forecast_in(None, now) is None
    assert marked[1] == rows[1]


# ---- through the CLI (SQLite file): the table at 80 columns, JSON, CSV -----------------------


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env |= {"SCREENER_DATABASE_URL": url, "COLUMNS": "80"}  # an 80-column reader
    return subprocess.run(
        [sys.executable, "-m", "screener.cli", "nodes", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_nodes_command_table_json_csv_mark_the_declining_node(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/screener.db"
    with open_store(url, upgrade=True) as store:
        seed_declining(store, datetime.now(UTC) - timedelta(hours=20))  # last sweep: not stale

    table = _cli(url)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert max(map(len, lines)) <= 80, table.stdout
    assert lines[0] == "4 nodes: 4 OK; 0 drained by screener; 0 stale; 1 declining", lines
    assert "declining; --all: all)" in lines[1] and "slow in" in table.stdout
    (row,) = [ln for ln in lines if ln.startswith("  node01 ")]  # one line, not folded
    assert row.split()[1] == "OK", row
    assert "node02" not in table.stdout  # steady and fresh: no look needed
    doc = {r["node"]: r for r in json.loads(_cli(url, "--json").stdout)}
    words = doc["node01"]["declining"]
    # below the table (last) the same words, folded at 80 columns
    start = next(i for i, ln in enumerate(lines) if ln.startswith("node01 declining: "))
    assert " ".join(" ".join(lines[start:]).split()) == f"node01 declining: {words}", lines
    m = DATE.search(words)
    soon = row.split()[-1]
    assert m and _forecast(soon) == soon, (words, row)
    # the words' date is the table's "~Nd" from now (give or take the rounding)
    ahead = date.fromisoformat(m[1]) - datetime.now(UTC).date()
    assert abs(ahead.days - int(soon.strip("~<d"))) <= 1, (words, row)

    every = _cli(url, "--all")
    assert every.returncode == 0 and max(map(len, every.stdout.splitlines())) <= 80
    (two,) = [ln for ln in every.stdout.splitlines() if ln.startswith("  node02 ")]
    assert two.split()[1] == "OK" and two.split()[-1] == "-", two

    assert doc["node01"]["status"] == "OK" and doc["node01"]["slow_in"] == soon
    assert words.startswith("seq read 0.") and "per sweep; crosses 0.5x in ~" in words, words
    assert {doc[n]["declining"] for n in NAMES[1:]} == {None}
    assert {doc[n]["slow_in"] for n in NAMES[1:]} == {None}

    rows = {r["node"]: r for r in csv.DictReader(io.StringIO(_cli(url, "--csv").stdout))}
    assert list(rows["node01"])[-2:] == ["declining", "slow_in"]
    assert rows["node01"]["declining"] == doc["node01"]["declining"]
    assert rows["node01"]["slow_in"] == soon and rows["node02"]["slow_in"] == ""
