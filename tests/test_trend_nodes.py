"""`screener nodes` marks declining nodes (issue 46): over real stores (SQLite and the real
PostgreSQL) seeded with sweeps whose reads are this machine's captured healthy ratios
(tests/data/trend/bench_healthy_round1.json), one node's falling a few percent a sweep.
The mark is a warning: the node's status stays its verdict and it needs a look.

The marks are fitted once per sweep and stored (store/trend_marks.py): after seeding, the
tests refresh them as the sweep job does after its run (sweep.job.refresh_trend_marks);
`nodes` only reads them."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
from dataclasses import fields, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from trend_seed import HEALTHY, NAMES, seed_declining

from screener.cli.admin import declining_lines, needs_a_look, nodes_summary
from screener.hooks.log import HookLog
from screener.pipeline import ScreenResult
from screener.policy import Policy, TrendPolicy
from screener.probe_data import RunSummary, Status
from screener.store import Store, open_store, views
from screener.store.query_rows import NodeRow
from screener.store.tables import TREND_SCALES, TREND_STATUSES
from screener.store.trend import node_trends
from screener.store.trend_marks import TrendMark, read_marks, refresh_marks
from screener.sweep.job import refresh_trend_marks
from screener.verdict.trend import (
    Point,
    Scale,
    TrendStatus,
    TrendVerdict,
    declining,
    short_words,
)
from tests import cli_fork

pytest_plugins = ["store_fixtures"]  # db_store: SQLite and the real PostgreSQL

DATE = re.compile(r"slow ~(\d{4}-\d\d-\d\d)$")  # the forecast date ending the short words
STALE_S = 2 * 86400.0


def _forecast(cell: str | None) -> str:
    """The cell if it is a forecast as `nodes` shows it ('~9d', '<1d'), else ''."""
    return cell if cell and re.fullmatch(r"~\d+d|<1d", cell) else ""


def test_nodes_marks_the_declining_node_only_and_keeps_its_status(db_store: Store) -> None:
    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    run = seed_declining(db_store, last)
    now = last + timedelta(hours=6)
    # `nodes` never fits: until a sweep stored the marks, nobody is marked
    assert [r.declining for r in views.node_overview(db_store, now, Policy())] == [None] * 4
    refresh_marks(db_store, Policy(), last + timedelta(minutes=10), NAMES, run)  # the sweep's
    rows = {r.node: r for r in views.node_overview(db_store, now, Policy())}
    trends = node_trends(db_store, Policy(), now)
    (warned,) = [v for v in trends if v.status is TrendStatus.DECLINING]
    one = rows["node01"]
    assert one.status is Status.OK and not one.drained_by_screener  # a warning, not a verdict
    assert one.declining == short_words(warned), one.declining  # the stored fit, in short
    assert one.declining.startswith("seq read 0.") and "x/sweep, slow ~" in one.declining
    assert warned.crosses_at is not None and now < warned.crosses_at < now + timedelta(days=14)
    assert one.declining.endswith(f"slow ~{warned.crosses_at:%Y-%m-%d}")
    days = (warned.crosses_at - now) / timedelta(days=1)
    assert one.slow_in == (f"~{days:.0f}d" if days >= 1 else "<1d") == _forecast(one.slow_in)
    for steady in NAMES[1:]:
        assert rows[steady].declining is None and rows[steady].slow_in is None
    assert [n for n, r in rows.items() if needs_a_look(r, STALE_S)] == ["node01"]
    assert nodes_summary(list(rows.values()), STALE_S) == (
        "4 nodes: 4 OK; 0 drained by screener; 0 stale; 1 declining"
    )
    assert declining_lines(list(rows.values())) == [f"node01 declining: {one.declining}"]
    # without a policy (the exporter's and the bench's path) nothing is read or marked
    plain = views.node_overview(db_store, now)
    assert all(r.declining is None for r in plain) and not any(
        needs_a_look(r, STALE_S) for r in plain
    )
    # a mark fitted before [trend] since_days is of a node no sweep has reached since: its
    # series is gone, so is its mark (as a fit now would say)
    later = last + timedelta(days=10)
    short = Policy(trend=TrendPolicy(since_days=9))
    assert all(r.declining is None for r in views.node_overview(db_store, later, short))


def test_a_fleet_wide_fall_marks_nobody(db_store: Store) -> None:
    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    run = seed_declining(db_store, last, fleet_fall=True)
    fitted = refresh_marks(db_store, Policy(), last + timedelta(minutes=10), NAMES, run)
    assert {v.node for v in fitted} == set(NAMES)  # every node fitted and stored, none falls
    rows = views.node_overview(db_store, last + timedelta(hours=6), Policy())
    assert [r.declining for r in rows] == [None] * 4
    assert "declining" not in nodes_summary(rows, STALE_S)


def test_the_marks_table_allows_every_status_and_scale_of_the_fit() -> None:
    """tables.py spells them out (opening the store does not import the fit): the same."""
    assert tuple(s.value for s in TrendStatus) == TREND_STATUSES
    assert tuple(s.value for s in Scale) == TREND_SCALES


def _verdict(m: TrendMark) -> TrendVerdict:
    """The TrendVerdict a stored mark holds (without when and after which sweep)."""
    return TrendVerdict(**{f.name: getattr(m, f.name) for f in fields(TrendVerdict)})


def test_the_stored_marks_are_the_fit_and_a_refresh_replaces_them(db_store: Store) -> None:
    """Every field of every figure as node_trends fitted it, read back in one query; a
    refresh of some nodes replaces their rows only, and a node the fit now leaves out (no
    sweep within since_days) loses its rows."""
    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    run = seed_declining(db_store, last)
    at = last + timedelta(minutes=10)
    fitted = refresh_marks(db_store, Policy(), at, None, run)
    assert fitted == node_trends(db_store, Policy(), at)
    stored = read_marks(db_store)
    assert [_verdict(m) for m in stored] == sorted(fitted, key=lambda v: (v.node, v.figure))
    assert len(stored) > len(NAMES)  # seq read, rand read, read p99, SMART ... per node
    assert {(m.fitted_at, m.run_id) for m in stored} == {(at, run)}
    assert [(m.node, m.figure) for m in read_marks(db_store, declining_only=True)] == [
        ("node01", "seq read")
    ]
    assert read_marks(db_store, ["node02"]) == [m for m in stored if m.node == "node02"]
    assert read_marks(db_store, []) == [] and read_marks(db_store, ["node99"]) == []
    assert read_marks(db_store, since=at + timedelta(seconds=1)) == []

    later = at + timedelta(days=1)
    again = refresh_marks(db_store, Policy(), later, ["node02"])  # `trend --refresh node02`
    assert {v.node for v in again} == {"node02"}
    now = read_marks(db_store)
    assert [m for m in now if m.node != "node02"] == [m for m in stored if m.node != "node02"]
    assert {(m.fitted_at, m.run_id) for m in now if m.node == "node02"} == {(later, None)}
    # 30 days on, a 10-day look-back holds no sweep: node03's fit is empty, its rows go
    gone = refresh_marks(
        db_store, Policy(trend=TrendPolicy(since_days=10)), at + timedelta(days=30), ["node03"]
    )
    assert gone == []
    assert {m.node for m in read_marks(db_store)} == {"node01", "node02", "node04"}
    assert refresh_marks(db_store, Policy(), later, []) == []  # nothing asked, nothing done
    # every node at once: the whole table replaced, node03 back
    assert refresh_marks(db_store, Policy(), at, None, run) == fitted
    assert read_marks(db_store) == stored


def test_the_sweep_job_refreshes_the_marks_of_the_nodes_it_swept(db_store: Store) -> None:
    """What the sweep job calls once its run is stored (sweep.job.Sweep.run): the held
    nodes' marks fitted and stored with the run's id, one log line with the DECLINING count
    and the time; a run the database does not hold (spooled) refreshes nothing, said so."""
    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    run = seed_declining(db_store, last)
    result = ScreenResult(run, RunSummary(()), {}, 1, 60.0)
    log = HookLog("sweep")
    refresh_trend_marks(db_store, Policy(), result, ["node01", "node02"], log)
    stored = read_marks(db_store)
    assert {m.node for m in stored} == {"node01", "node02"} and {m.run_id for m in stored} == {run}
    (line,) = log.lines
    assert re.fullmatch(r"trend marks of 2 nodes refreshed in \d+\.\d s: 1 DECLINING: node01", line)
    rows = {r.node: r for r in views.node_overview(db_store, last + timedelta(hours=1), Policy())}
    assert rows["node01"].declining is not None and rows["node02"].declining is None

    spooled = replace(result, store_error="database unavailable; spooled")
    quiet = HookLog("sweep")
    refresh_trend_marks(db_store, Policy(), spooled, NAMES, quiet)
    assert quiet.lines == ["trend marks not refreshed: this sweep's run is not in the database"]
    assert read_marks(db_store) == stored


def test_a_failed_refresh_is_one_log_line_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A store that cannot be read (a table gone) or a fit that raises (a policy no config
    file would pass): refresh_trend_marks returns as usual (the sweep's exit is its own),
    one line says why, and the marks of the last good refresh stay."""
    with open_store(f"sqlite:///{tmp_path}/s.db", upgrade=True) as store:
        run = seed_declining(store, datetime(2026, 11, 20, 2, 0, tzinfo=UTC))
        result = ScreenResult(run, RunSummary(()), {}, 1, 60.0)
        refresh_trend_marks(store, Policy(), result, NAMES, HookLog("sweep"))
        before = read_marks(store)
        assert before

        odd = Policy(trend=TrendPolicy(confidence=1.5))  # fit() raises ValueError
        log = HookLog("sweep")
        refresh_trend_marks(store, odd, result, NAMES, log)  # returns, does not raise
        (line,) = log.lines
        assert line.startswith("trend marks not refreshed (ValueError: confidence must be")
        assert line.endswith("): the previous ones stay") and read_marks(store) == before

        with store.engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE node_probes RENAME TO node_probes_gone")
        log = HookLog("sweep")
        refresh_trend_marks(store, Policy(), result, NAMES, log)
        (line,) = log.lines
        assert line.startswith("trend marks not refreshed (cannot read the nodes' sweep figures")
        assert "node_probes" in line and read_marks(store) == before


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
    blank: dict[str, Any] = dict.fromkeys(
        ("read_mb_s", "write_mb_s", "ratio", "read_p99_ms", "age_s")
    )
    one = NodeRow(
        node="node01", status=Status.OK, reason="ok", run_id=1, last_probe_at=t0,
        drained_by_screener=False, drained_at=None, drain_reason=None, **blank,
    )  # fmt: skip
    rows = [one, replace(one, node="node02")]
    now = t0 + timedelta(days=7, hours=1)  # an hour after the newest sweep
    marked = views.mark_declining(rows, [seq, rand, steady], now)
    words = marked[0].declining or ""
    assert words.split(" | ") == [short_words(rand), short_words(seq)], words
    assert words.startswith("rand read 0.") and " | seq read 0." in words
    assert marked[0].slow_in == views.forecast_in(rand.crosses_at, now) == "~4d"  # 3.6 days
    assert views.forecast_in(now + timedelta(hours=20), now) == "<1d"
    assert views.forecast_in(now - timedelta(hours=2), now) == "<1d"  # due: sweep it now
    assert views.forecast_in(None, now) is None
    assert marked[1] == rows[1]


def test_nodes_slurm_keeps_the_mark_beside_slurms_view(db_store: Store) -> None:
    """`nodes --slurm` joins Slurm's nodes to screener's rows (report/slurm_view.py): the
    declining node keeps its words and its `slow in` (--json), and the words follow the table."""
    from screener.cli.admin import HUMAN_COLUMNS
    from screener.report.slurm_view import with_slurm
    from screener.slurm.client import SlurmNode

    last = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
    run = seed_declining(db_store, last)
    refresh_marks(db_store, Policy(), last + timedelta(minutes=10), NAMES, run)
    rows = views.node_overview(db_store, last + timedelta(hours=6), Policy())
    slurm = [SlurmNode(n, frozenset({"IDLE"})) for n in [*NAMES, "node05"]]
    joined = {r.node: r for r in with_slurm(rows, slurm, "screener:")}
    marked = {r.node: r for r in rows if r.declining is not None}
    assert set(marked) == {"node01"}
    one = joined["node01"]
    assert (one.declining, one.slow_in) == (marked["node01"].declining, marked["node01"].slow_in)
    assert one.slow_in is not None and one.slurm_state == "IDLE"
    assert joined["node05"].slow_in is None and joined["node05"].note == "never probed"
    # the --slurm table leaves `slow in` to the words below it, as `nodes` prints them
    assert "slow_in" not in HUMAN_COLUMNS["nodes --slurm"]
    assert declining_lines(list(joined.values())) == [f"node01 declining: {one.declining}"]


# ---- through the CLI (SQLite file): the table at 80 columns, JSON, CSV -----------------------


def _cli(url: str, *args: str, command: str = "nodes") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env |= {"SCREENER_DATABASE_URL": url, "COLUMNS": "80"}  # an 80-column reader
    return cli_fork.run([command, *args], timeout=120, env=env, check=False)


def test_nodes_command_table_json_csv_mark_the_declining_node(tmp_path: Path) -> None:
    """`nodes` reads the stored marks: none before a sweep (or `trend --refresh`) stored
    them; `screener trend --refresh` stores every node's fit, then `nodes` marks node01."""
    url = f"sqlite:///{tmp_path}/screener.db"
    with open_store(url, upgrade=True) as store:
        seed_declining(store, datetime.now(UTC) - timedelta(hours=20))  # last sweep: not stale

    unmarked = _cli(url)
    assert unmarked.returncode == 0, unmarked.stderr
    assert unmarked.stdout.startswith("4 nodes: 4 OK; 0 drained by screener; 0 stale\n")
    refresh = _cli(url, "--refresh", command="trend")
    assert refresh.returncode == 0, refresh.stderr
    assert refresh.stdout.startswith("4 nodes with sweeps: 1 declining"), refresh.stdout
    assert "stored as the marks `screener nodes` reads (within 14d)" in refresh.stdout

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
    assert words.startswith("seq read 0.") and "x/sweep, slow ~" in words, words
    assert {doc[n]["declining"] for n in NAMES[1:]} == {None}
    assert {doc[n]["slow_in"] for n in NAMES[1:]} == {None}

    rows = {r["node"]: r for r in csv.DictReader(io.StringIO(_cli(url, "--csv").stdout))}
    assert list(rows["node01"])[-2:] == ["declining", "slow_in"]
    assert rows["node01"]["declining"] == doc["node01"]["declining"]
    assert rows["node01"]["slow_in"] == soon and rows["node02"]["slow_in"] == ""
