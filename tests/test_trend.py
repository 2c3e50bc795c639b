"""The early-warning fit (issue 46), pure, over figures the project captured: the benches'
healthy round-1 ratios (tests/data/trend/bench_healthy_round1.json: unpaced emulated nodes,
a 2x spread within a run) and, for declines, those same real ratios times a falling factor,
so the noise is this machine's and only the trend is made."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from screener.policy import Policy, TrendPolicy
from screener.probe_data import NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import Store, open_store
from screener.store.trend import RAND_READ, SEQ_READ, node_series, node_trends
from screener.verdict.trend import Point, TrendStatus, current_series, declining, fit
from tests.store_data import full_probe

pytest_plugins = ["store_fixtures"]  # db_store: SQLite and the real PostgreSQL

DATA = Path(__file__).parent / "data" / "trend"
T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)  # nightly sweeps at 02:00
HORIZON = timedelta(days=14)


def _healthy() -> list[tuple[str, list[float]]]:
    raw = json.loads((DATA / "bench_healthy_round1.json").read_text())
    return [(f"{s['file']}:{s['node']}", s["ratios"]) for s in raw["series"]]


HEALTHY = _healthy()


def nightly(ratios: list[float], recipe: str = "r1", start: int = 0) -> list[Point]:
    return [Point(T0 + timedelta(days=start + i), r, recipe) for i, r in enumerate(ratios)]


def test_the_captured_series_are_healthy_noise_with_a_wide_spread() -> None:
    """The data is what the rule must sit still on: 24 series, hundreds of sweeps, a
    spread of more than 1.5x between a node's lowest and highest round."""
    assert len(HEALTHY) == 24 and sum(len(r) for _, r in HEALTHY) > 1000
    assert max(max(r) / min(r) for _, r in HEALTHY) > 1.5
    assert min(min(r) for _, r in HEALTHY) < 0.75


def test_no_window_of_any_healthy_series_is_declining() -> None:
    """Every 12-sweep window of every healthy series, as each night would see it."""
    flagged, windows = [], 0
    for name, ratios in HEALTHY:
        points = nightly(ratios)
        for k in range(6, len(points) + 1):
            windows += 1
            v = declining("n", points[:k], 0.5, HORIZON)
            if v.status is TrendStatus.DECLINING:
                flagged.append((name, k, v.reason))
    assert windows > 800
    assert flagged == []


def _falling(ratios: list[float], rate: float) -> list[float]:
    return [r * rate**k for k, r in enumerate(ratios)]


@pytest.mark.parametrize("rate", [0.97, 0.95])
def test_a_slow_decline_under_real_noise_is_flagged_sweeps_before_the_line(rate: float) -> None:
    """Real noise times a fall of 3 or 5 % a sweep: flagged while the node still reads over
    the line, at least 3 sweeps before its first figure below 0.5x, in nearly every series."""
    leads, missed = [], []
    for name, ratios in HEALTHY:
        values = _falling(ratios[:40], rate)
        first_slow = next((k for k, v in enumerate(values) if v < 0.5), None)
        if first_slow is None or first_slow < 9:
            continue
        points = nightly(values)
        first = next(
            (
                k
                for k in range(6, first_slow + 1)
                if declining("n", points[:k], 0.5, HORIZON).status is TrendStatus.DECLINING
            ),
            None,
        )
        if first is None:
            missed.append(name)
            continue
        assert declining("n", points[:first], 0.5, HORIZON).level > 0.5  # type: ignore[operator]
        leads.append(first_slow - (first - 1))
    assert len(leads) >= 10 and len(missed) <= 2, (leads, missed)
    assert sorted(leads)[len(leads) // 2] >= 3, leads  # median lead


def test_the_words_say_figure_slope_and_forecast() -> None:
    """The issue's sentence: figure, per-sweep fall, sweeps and date of the crossing."""
    _, ratios = HEALTHY[0]
    points = nightly(_falling(ratios[:10], 0.95))
    v = declining("node07", points, 0.5, HORIZON)
    assert v.status is TrendStatus.DECLINING, v.reason
    m = re.fullmatch(
        r"node07: seq read (\d\.\d\d)x peers, falling (\d\.\d\d)x per sweep; "
        r"crosses 0\.5x in ~(\d+) sweeps \(~(\d{4}-\d\d-\d\d)\)",
        v.reason,
    )
    assert m, v.reason
    assert 0.5 < float(m[1]) < 0.75 and 0.02 <= float(m[2]) <= 0.06
    assert v.sweeps_to_cross is not None and int(m[3]) == round(v.sweeps_to_cross)
    assert v.crosses_at is not None and m[4] == f"{v.crosses_at:%Y-%m-%d}"
    assert v.crosses_at == points[-1].at + timedelta(days=v.days_to_cross or 0)
    assert v.per_sweep is not None and v.per_sweep < 0 and v.sweeps == 10


def test_gaps_keep_the_slope_per_sweep_and_the_date_in_real_time() -> None:
    """Sweeps missed (node busy, UNKNOWN) leave holes: the slope is per day, "per sweep" is
    per the usual interval, so the same decline with holes reads the same."""
    _, ratios = HEALTHY[3]
    values = _falling(ratios[:14], 0.95)
    whole = nightly(values)
    holes = [p for i, p in enumerate(whole) if i not in (3, 4, 5, 9)]
    a = declining("n", whole, 0.5, HORIZON)
    b = declining("n", holes, 0.5, HORIZON)
    assert a.status is b.status is TrendStatus.DECLINING, (a.reason, b.reason)
    assert b.sweeps == 10
    assert a.per_sweep and b.per_sweep and abs(a.per_sweep - b.per_sweep) < 0.02
    assert a.crosses_at and b.crosses_at and abs(a.crosses_at - b.crosses_at) < timedelta(days=3)


def test_a_new_recipe_starts_a_new_series() -> None:
    """A decline under the old recipe says nothing of the new one: too few, no forecast;
    once the new recipe has sweeps of its own they alone are fitted."""
    _, ratios = HEALTHY[5]
    old = nightly(_falling(ratios[:10], 0.93), "old")
    new = nightly(ratios[10:14], "new", start=10)
    v = declining("n", old + new, 0.5, HORIZON)
    assert (v.status, v.sweeps, v.recipe) == (TrendStatus.TOO_FEW, 4, "new"), v.reason
    assert v.reason == "n: seq read: 4 sweeps of this recipe, a forecast needs 6: no forecast"
    assert declining("n", old, 0.5, HORIZON).status is TrendStatus.DECLINING
    later = old + nightly(ratios[10:22], "new", start=10)
    w = declining("n", later, 0.5, HORIZON)
    assert w.status is TrendStatus.STEADY and w.recipe == "new" and w.sweeps == 12
    assert current_series(later) == later[10:]


def test_too_few_sweeps_give_no_forecast_and_say_so() -> None:
    _, ratios = HEALTHY[1]
    for n in (0, 1, 5):
        v = declining("n", nightly(_falling(ratios[:n], 0.8)), 0.5, HORIZON)
        assert v.status is TrendStatus.TOO_FEW and v.level is None and v.crosses_at is None
        assert "no forecast" in v.reason and f"{n} sweep" in v.reason


def test_already_below_the_line_is_the_slow_rules_business() -> None:
    """A step change (slow from one sweep on) is no forecast: the slow rules drain it."""
    _, ratios = HEALTHY[2]
    step = ratios[:6] + [r * 0.3 for r in ratios[6:14]]
    v = declining("n", nightly(step), 0.5, HORIZON)
    assert v.status is TrendStatus.BELOW and v.level is not None and v.level <= 0.5, v.reason
    assert "the slow rules' business" in v.reason


def test_a_fall_too_slow_for_the_horizon_is_steady_with_its_forecast() -> None:
    _, ratios = HEALTHY[4]
    points = nightly(_falling(ratios[:12], 0.98))
    v = declining("n", points, 0.5, timedelta(days=3))
    assert v.status is TrendStatus.STEADY and "not surely within the 3d horizon" in v.reason
    assert v.days_to_cross is not None and v.days_to_cross > 3


def test_the_band_holds_the_slope_and_is_exact_on_a_clean_line() -> None:
    _, ratios = HEALTHY[6]
    f = fit(nightly(ratios[:12]))
    assert f is not None and f.low <= f.slope <= f.high and f.low < 0 < f.high
    clean = fit(nightly([0.9 * 0.95**k for k in range(8)]))
    assert clean is not None
    assert math.isclose(clean.slope, math.log(0.95), rel_tol=1e-9)
    assert math.isclose(clean.low, clean.high, rel_tol=1e-9)
    assert math.isclose(clean.level, 0.9 * 0.95**7, rel_tol=1e-9)
    assert clean.cadence_days == 1.0
    with pytest.raises(ValueError, match="confidence"):
        fit(nightly(ratios[:8]), confidence=1.0)


def test_bad_figures_and_same_time_points_are_no_series() -> None:
    same = [Point(T0, r, "r") for r in (1.0, 0.9, 0.8, 0.7, 0.6, 0.55)]
    assert declining("n", same, 0.5, HORIZON).status is TrendStatus.TOO_FEW
    junk = nightly([1.0, math.nan, 0.0, -1.0, math.inf])
    assert [p.ratio for p in current_series(junk)] == [1.0]


# ---- the store's series (screener/store/trend.py) -------------------------------------------


def _sweep(
    store: Store,
    when: datetime,
    reads: dict[str, float],
    recipe: str = "r1",
    trigger: Trigger = Trigger.SWEEP,
    error: str = "",
) -> int:
    """A sweep as the pipeline records it: each node's round-1 probe (the captured real fio
    output, its seq read set to ``reads`` MB/s), the verdicts and the round's peer median."""
    nodes = sorted(reads)
    run = store.start_run(trigger, nodes, {}, None, ",".join(nodes), when)
    base = full_probe()
    assert base.seq_read is not None
    for n in nodes:
        seq = replace(base.seq_read, bw_bytes=reads[n] * 1e6)
        probe: NodeProbe = replace(base, node=n, seq_read=seq, recipe=recipe)
        if error and n == nodes[0]:
            probe = NodeProbe(node=n, error=error, error_kind="unreachable", duration_s=1.0)
        store.record_probe(run, probe, 1)
        if not error:  # a round 2 beside references: another yardstick, never a point
            store.record_probe(run, replace(probe, seq_read=replace(seq, bw_bytes=1.0)), 2)
    median = sorted(reads.values())[len(reads) // 2]
    verdicts = tuple(Verdict(n, Status.OK, "ok", read_mb_s=reads[n], recipe=recipe) for n in nodes)
    rand = base.rand_read.iops if base.rand_read else None
    store.record_verdicts(
        run, RunSummary(verdicts=verdicts, peer_read_median_mb_s=median, peer_rand_median_iops=rand)
    )
    store.finish_run(run, when + timedelta(minutes=5))
    return run


def test_the_store_gives_round_one_figures_over_the_round_median(db_store: Store) -> None:
    """Per node and figure: round 1 over the run's peer median, sweeps and rolling sweeps
    only, no failed probe, every recipe kept (the fit picks its own), oldest first."""
    peers = {"node02": 300.0, "node03": 310.0, "node04": 290.0}
    runs = []
    for i, (mine, recipe) in enumerate([(300.0, "r1"), (240.0, "r1"), (150.0, "r2")]):
        trigger = Trigger.ROLLING if i == 1 else Trigger.SWEEP
        runs.append(
            _sweep(db_store, T0 + timedelta(days=i), {"node01": mine, **peers}, recipe, trigger)
        )
    _sweep(db_store, T0 + timedelta(days=3), {"node01": 10.0, **peers}, trigger=Trigger.PROLOG)
    _sweep(db_store, T0 + timedelta(days=4), {"node01": 10.0, **peers}, error="unreachable")
    (s,) = node_series(db_store, ["node01"], T0 - timedelta(days=1))
    seq = s.points[SEQ_READ]
    assert [(p.run_id, p.recipe) for p in seq] == [
        (runs[0], "r1"),
        (runs[1], "r1"),
        (runs[2], "r2"),
    ]
    assert [round(p.ratio, 3) for p in seq] == [1.0, 0.8, 0.5]
    assert [p.at for p in seq] == [T0, T0 + timedelta(days=1), T0 + timedelta(days=2)]
    assert [round(p.ratio, 6) for p in s.points[RAND_READ]] == [1.0, 1.0, 1.0]
    assert node_series(db_store, ["node01"], T0 + timedelta(hours=1))[0].points[SEQ_READ] == seq[1:]
    assert [x.node for x in node_series(db_store, None, T0)] == ["node01", *sorted(peers)]
    assert node_series(db_store, ["node09"], T0) == []


def test_node_trends_flags_the_declining_node_and_nobody_in_a_fleet_wide_fall(
    db_store: Store,
) -> None:
    """Real healthy ratios as each node's reads: node01 falls 5 % a sweep beside them;
    later every node falls together (the peer median with them): only node01 warned."""
    series = [r for _, r in HEALTHY[:4]]
    names = ["node01", "node02", "node03", "node04"]
    for k in range(12):
        fleet = 0.9**k if k >= 6 else 1.0  # from sweep 6 on the whole fleet slows
        reads = {n: 300.0 * fleet * series[i][k] for i, n in enumerate(names)}
        reads["node01"] *= 0.95**k
        _sweep(db_store, T0 + timedelta(days=k), reads)
    policy = Policy(trend=TrendPolicy(since_days=30))
    now = T0 + timedelta(days=12)
    out = node_trends(db_store, policy, now)
    flagged = [(v.node, v.figure) for v in out if v.status is TrendStatus.DECLINING]
    assert flagged == [("node01", SEQ_READ)], [v.reason for v in out]
    assert out[0].reason.startswith("node01: seq read 0.") and out[0].threshold == 0.5
    rand = [v for v in out if v.figure == RAND_READ]
    assert len(rand) == 4 and {v.threshold for v in rand} == {0.25}
    assert all(v.status is TrendStatus.STEADY for v in out[1:]), [v.reason for v in out]
    few = node_trends(
        db_store, Policy(trend=TrendPolicy(min_sweeps=20, window=20)), now, ["node01"]
    )
    assert {v.status for v in few} == {TrendStatus.TOO_FEW}


# ---- `screener trend` ------------------------------------------------------------------------


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SCREENER_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "screener.cli", "trend", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "SCREENER_DATABASE_URL": url},
        stdin=subprocess.DEVNULL,
    )


def test_trend_command_table_json_csv_and_one_line_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/screener.db"
    names = ["node01", "node02", "node03", "node04"]
    with open_store(url, upgrade=True) as store:
        for k in range(8):
            reads = {n: 300.0 * HEALTHY[i][1][k] for i, n in enumerate(names)}
            reads["node01"] *= 0.93**k
            _sweep(store, datetime.now(UTC) - timedelta(days=8 - k), reads)
    table = _cli(url)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert "4 nodes with sweeps: 1 declining (crossing the slow line within 14d)" in out, out
    assert "declining nodes" in out and "node02" not in out
    assert re.search(
        r"^node01: seq read 0\.\d\dx peers, falling 0\.0\dx per sweep; "
        r"crosses 0\.5x in ~\d+ sweeps \(~\d{4}-\d\d-\d\d\)$",
        out,
        re.M,
    ), out
    every = _cli(url, "--all", "node[01-02]")
    assert every.returncode == 0 and "node02" in every.stdout and "node03" not in every.stdout
    rows = json.loads(_cli(url, "--json").stdout)
    assert len(rows) == 8 and rows[0]["node"] == "node01" and rows[0]["status"] == "DECLINING"
    assert {r["figure"] for r in rows} == {"seq read", "rand read"}
    assert rows[0]["crosses_at"].startswith("20") and rows[0]["sweeps"] == 8
    short = json.loads(_cli(url, "--json", "--horizon", "1d").stdout)
    assert all(r["status"] != "DECLINING" for r in short)
    csv_out = _cli(url, "--csv").stdout.splitlines()
    assert csv_out[0].startswith("node,figure,status,sweeps,level,per_sweep") and len(csv_out) == 9
    for bad, says in (
        (("node[",), "missing bracket in node list 'node['"),
        (("--horizon", "0d"), "invalid --horizon '0d'"),
        (("--horizon", "soon"), "invalid --horizon 'soon'"),
    ):
        res = _cli(url, *bad)
        assert res.returncode == 1 and res.stdout == "", res
        assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr
    both = _cli(url, "--json", "--csv")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    with open_store(f"sqlite:///{tmp_path}/empty.db", upgrade=True):
        pass
    empty = _cli(f"sqlite:///{tmp_path}/empty.db")
    assert empty.returncode == 0 and "no sweep figures in the store yet" in empty.stdout


# ---- the exporter's gauge -------------------------------------------------------------------


def test_exporter_serves_the_declining_nodes_forecast_only(db_store: Store) -> None:
    from prometheus_client import CollectorRegistry

    from screener.metrics.collector import StoreCollector

    names = ["node01", "node02", "node03", "node04"]
    for k in range(8):
        reads = {n: 300.0 * HEALTHY[i][1][k] for i, n in enumerate(names)}
        reads["node01"] *= 0.93**k
        _sweep(db_store, T0 + timedelta(days=k), reads)
    now = T0 + timedelta(days=8)
    registry = CollectorRegistry()
    registry.register(StoreCollector(db_store, clock=lambda: now))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for m in registry.collect()
        for s in m.samples
        if s.name.startswith("screener_node_trend_")
    }
    (expected,) = [
        v for v in node_trends(db_store, Policy(), now) if v.status is TrendStatus.DECLINING
    ]
    key = (("figure", "seq read"), ("node", "node01"))
    assert samples == {
        ("screener_node_trend_days_to_slow_line", key): expected.days_to_cross,
        ("screener_node_trend_sweeps_to_slow_line", key): expected.sweeps_to_cross,
    }
    assert 0 < (expected.days_to_cross or 0) < 14
