"""Admin queries (`nodes`, `history`, `flaky`, `show`, `runs`) on both backends, over the
seeded fleet of admin_seed.py, and through the real CLI for the output formats."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from admin_seed import FLAKY, NODES, RESUMED, SLOW, TTR_S, Seeded, seed_fleet

from screener.cli.admin import parse_since
from screener.errors import ConfigError, StoreError
from screener.probe_data import Status, Trigger
from screener.store import Store, open_store, views
from screener.store.migrate import upgrade
from tests import cli_fork

pytest_plugins = ["store_fixtures"]

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def fleet(db_store: Store) -> tuple[Store, Seeded]:
    return db_store, seed_fleet(db_store, NOW)


def test_nodes_shows_latest_verdict_age_and_screener_drains(fleet: tuple[Store, Seeded]) -> None:
    store, seeded = fleet
    rows = {r.node: r for r in views.node_overview(store, NOW)}
    assert sorted(rows) == NODES
    slow = rows[SLOW]
    assert slow.status is Status.SLOW_READ and slow.run_id == seeded.prolog
    assert slow.age_s == pytest.approx(2 * 3600)  # the prolog run 2 hours ago
    assert slow.drained_by_screener and slow.drain_reason and "SLOW_READ" in slow.drain_reason
    # node06 was drained then resumed: not drained now; node07's drain was stopped by the guard
    assert not rows[RESUMED].drained_by_screener and not rows["node07"].drained_by_screener
    assert rows["node05"].status is Status.UNKNOWN and rows["node05"].age_s == pytest.approx(86400)
    assert rows["node08"].run_id == seeded.sweeps[-1]  # not in the prolog run: last sweep
    assert rows["node01"].read_mb_s == pytest.approx(2900.0)


def test_history_is_windowed_and_newest_first(fleet: tuple[Store, Seeded]) -> None:
    store, seeded = fleet
    hist = views.node_history(store, SLOW, NOW - timedelta(days=30))
    assert [h.run_id for h in hist] == [seeded.prolog, *reversed(seeded.sweeps)]
    assert hist[0].status is Status.SLOW_READ and hist[0].read_p99_ms == pytest.approx(1500.0)
    assert hist[0].signals == ("peer_read", "ratio")
    short = views.node_history(store, SLOW, NOW - timedelta(days=1, hours=1))
    assert [h.run_id for h in short] == [seeded.prolog, seeded.sweeps[-1]]
    with pytest.raises(StoreError, match="node99 is not in the database"):
        views.node_history(store, "node99", NOW - timedelta(days=30))


def test_flaky_ranks_three_episodes_above_one_and_shows_recovery(
    fleet: tuple[Store, Seeded],
) -> None:
    store, _ = fleet
    rows = views.flaky(store, NOW - timedelta(days=30), 1)
    assert rows[0].node == FLAKY and rows[0].episodes == 3
    assert (rows[0].prolog, rows[0].sweep, rows[0].job) == (1, 1, 1)
    assert rows[0].ttr_median_s == pytest.approx(4 * 3600) and rows[0].ttr_max_s == 5 * 3600
    by = {r.node: r for r in rows}
    assert by[RESUMED].episodes == 1 and by[RESUMED].ttr_median_s == pytest.approx(TTR_S)
    assert by[RESUMED].resumes == 1 and not by[RESUMED].open
    assert by[SLOW].open and by[SLOW].ttr_median_s is None
    assert [r.node for r in views.flaky(store, NOW - timedelta(days=30), 2)] == [FLAKY]
    # a window after the flaky node's first two episodes leaves it one: not repeated
    assert views.flaky(store, NOW - timedelta(days=4, hours=12), 2) == []


def test_show_run_lists_nodes_signals_and_drains(fleet: tuple[Store, Seeded]) -> None:
    store, seeded = fleet
    detail = views.run_detail(store, seeded.sweeps[3])
    assert detail.run.trigger is Trigger.SWEEP and detail.run.n_slow == 1
    by = {n.node: n for n in detail.nodes}
    assert by[SLOW].actions == ("drain",) and by[SLOW].signals == ("peer_read", "ratio")
    assert by[SLOW].slurm_reason and "SLOW_READ" in by[SLOW].slurm_reason
    assert by["node01"].actions == () and detail.peer_read_median_mb_s == pytest.approx(2990.0)
    guard = views.run_detail(store, seeded.sweeps[1])
    assert {n.node: n.actions for n in guard.nodes}["node07"] == ("guard_trip",)
    with pytest.raises(StoreError, match="run 9999 does not exist"):
        views.run_detail(store, 9999)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30d", 30 * 86400), ("12h", 43200), ("2w", 1209600), ("1.5m", 90)]
)
def test_parse_since(text: str, seconds: float) -> None:
    assert parse_since(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "-3d", "0d", "3 days", "3y"])
def test_parse_since_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="--since"):
        parse_since(text)


# ---- through the CLI (SQLite file), for the output formats -------------------------------


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli_fork.run(args, env=env, timeout=60, check=False)


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Seeded]:
    import os

    url = f"sqlite:///{tmp_path_factory.mktemp('admin') / 'admin.db'}"
    upgrade(url)
    with open_store(url) as store:
        seeded = seed_fleet(store, NOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env["SCREENER_DATABASE_URL"] = url  # no SCREENER_CONFIG: the built-in defaults
    return env, seeded


def test_cli_every_query_prints_table_json_and_csv(
    cli_env: tuple[dict[str, str], Seeded],
) -> None:
    env, seeded = cli_env
    queries = [
        ["nodes"],
        ["history", SLOW, "--since", "30d"],
        ["flaky", "--since", "30d", "--min-episodes", "1"],
        ["runs"],
        ["show", str(seeded.sweeps[3])],
    ]
    for q in queries:
        table, js, cs = (_cli(env, *q, *fmt) for fmt in ([], ["--json"], ["--csv"]))
        for res in (table, js, cs):
            assert res.returncode == 0, (q, res.stderr)
        doc = json.loads(js.stdout)
        rows = list(csv.DictReader(io.StringIO(cs.stdout)))
        assert len(doc) == len(rows) > 0, q
        assert list(rows[0]) == list(doc[0]), q  # same columns in both
    nodes = {r["node"]: r for r in json.loads(_cli(env, "nodes", "--json").stdout)}
    assert nodes[SLOW]["drained_by_screener"] is True and nodes[SLOW]["status"] == "SLOW_READ"
    flaky = json.loads(_cli(env, "flaky", "--min-episodes", "1", "--json").stdout)
    assert flaky[0]["node"] == FLAKY and flaky[0]["episodes"] == 3
    # below the verdicts, what screener did to the node (its drain), never in --json/--csv
    hist = _cli(env, "history", SLOW, "--since", "30d").stdout
    assert f"what screener did to {SLOW} (newest first" in hist and "  drain" in hist, hist
    assert "what screener did" not in _cli(env, "history", SLOW, "--json").stdout
    shown = _cli(env, "show", str(seeded.sweeps[3]))
    assert "peer read median: 2,990 MB/s" in shown.stdout and "drain" in shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["history", "node03", "--since", "soon"], "--since must be a positive duration"),
        (["flaky", "--min-episodes", "0"], "--min-episodes must be within 1.."),
        (["show", "424242"], "run 424242 does not exist"),
        (["history", "bad;name"], "node"),
        (["history", "node77"], "node77 is not in the database"),
    ],
)
def test_cli_bad_input_is_one_line(
    cli_env: tuple[dict[str, str], Seeded], args: list[str], message: str
) -> None:
    env, _ = cli_env
    res = _cli(env, *args)
    assert res.returncode == 1 and res.stderr.startswith("screener: error: ")
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_nodes_table_shows_what_needs_a_look(fleet: tuple[Store, Seeded]) -> None:
    from screener.cli.admin import needs_a_look, nodes_summary

    store, _ = fleet
    rows = views.node_overview(store, NOW)
    look = sorted(r.node for r in rows if needs_a_look(r, 2 * 86400))
    assert look == [SLOW, "node05"]  # SLOW_READ and drained; UNKNOWN
    # two days later every node is stale
    later = views.node_overview(store, NOW + timedelta(days=3))
    assert all(needs_a_look(r, 2 * 86400) for r in later)
    assert nodes_summary(rows, 2 * 86400) == (
        "8 nodes: 6 OK, 1 SLOW_READ, 1 UNKNOWN; 1 drained by screener; 0 stale"
    )
