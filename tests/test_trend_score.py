"""The early warning scored in shadow (issue 46): did the nodes it flagged later become SLOW,
and how early? Pure replays over captured figures (tests/data/trend/bench_healthy_round1.json:
the benches' healthy round-1 ratios, unpaced emulated nodes, a 2x spread within a run; for
declines those same ratios times a falling factor, so the noise is this machine's), then the
store's read (SQLite and PostgreSQL) and `screener accuracy --by rule` on a seeded store."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from screener.ingest.rule_accuracy import TrendRow, by_rule
from screener.policy import Policy, TrendPolicy
from screener.probe_data import NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import Store, open_store
from screener.store.trend import SEQ_READ, node_series, node_trends
from screener.store.trend_outcomes import node_statuses, trend_rule, trend_scores
from screener.verdict.trend import Point, TrendStatus, TrendVerdict, declining
from screener.verdict.trend_score import (
    Outcome,
    StatusAt,
    TrendRule,
    Why,
    replay,
    score_node,
    summarize,
)
from tests import cli_fork
from tests.store_data import full_probe

pytest_plugins = ["store_fixtures"]  # db_store: SQLite and the real PostgreSQL

DATA = Path(__file__).parent / "data" / "trend"
T0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)  # nightly sweeps at 02:00
DAY = timedelta(days=1)
DECLINING = TrendStatus.DECLINING
HORIZON = timedelta(days=14)


def seq_read(node: str, figure: str, points: Sequence[Point]) -> TrendVerdict:
    """The seq read's decision as `screener trend` makes it by default (line 0.5x)."""
    return declining(node, points, 0.5, HORIZON, figure=figure)


RULE = TrendRule(seq_read, HORIZON)
OK, SLOW = Status.OK, Status.SLOW_READ


def _healthy() -> list[tuple[str, list[float]]]:
    raw = json.loads((DATA / "bench_healthy_round1.json").read_text())
    return [(f"{s['file']}:{s['node']}", s["ratios"]) for s in raw["series"]]


HEALTHY = _healthy()


def nightly(ratios: list[float], recipe: str = "r1", start: int = 0) -> list[Point]:
    return [Point(T0 + (start + i) * DAY, r, recipe) for i, r in enumerate(ratios)]


def judged(points: list[Point], line: float = 0.5) -> list[StatusAt]:
    """Each sweep's verdict as the peer rule gives it: SLOW_READ under the line, else OK."""
    return [StatusAt(p.at, SLOW if p.ratio < line else OK) for p in points]


def falling(ratios: list[float], rate: float, after: int = 6) -> list[float]:
    """Real noise, healthy for ``after`` sweeps, then a fall of (1 - rate) a sweep."""
    return [r * rate ** max(0, k - after + 1) for k, r in enumerate(ratios)]


def test_the_healthy_series_give_no_warning_in_any_sweep() -> None:
    """Every sweep of the 24 healthy series replayed as that night saw it: a forecast at
    most sweeps, DECLINING at none, so no false warning."""
    scores = [
        score_node(name, {SEQ_READ: nightly(r)}, [], RULE, T0 + 400 * DAY) for name, r in HEALTHY
    ]
    total = summarize(scores)
    assert total.nodes == 24 and total.sweeps > 1000 and total.judged > 850
    assert (total.declining, total.warnings, total.false, total.missed) == (0, 0, 0, 0)
    assert total.lead_sweeps is None and total.lead_days is None


@pytest.mark.parametrize(("rate", "lead"), [(0.95, 5), (0.92, 3)])
def test_a_decline_under_real_noise_is_warned_before_its_first_slow(rate: float, lead: int) -> None:
    """Healthy for 6 sweeps, then 5 or 8 % a sweep: nearly every series warned while over
    the line and confirmed by its first SLOW_READ, with a median lead of >= ``lead``."""
    scores = []
    for name, ratios in HEALTHY:
        points = nightly(falling(ratios[:40], rate))
        if min(p.ratio for p in points) >= 0.5:
            continue  # a short series that never reaches the line
        scores.append(score_node(name, {SEQ_READ: points}, judged(points), RULE, points[-1].at))
    total = summarize(scores)
    assert total.nodes >= 20 and total.false == 0, total
    assert total.confirmed >= total.nodes - 2 and total.missed <= 2, total
    assert total.lead_sweeps is not None and total.lead_sweeps >= lead, total
    assert total.lead_days == total.lead_sweeps  # nightly: a sweep a day
    for s in scores:
        for f in s.flags:
            assert f.level is not None and f.level > 0.5 and f.figure == SEQ_READ, f
            assert f.reason.startswith(f"{s.node}: seq read ") and "crosses 0.5x" in f.reason
            if f.outcome is Outcome.CONFIRMED:
                assert f.slow_at is not None and f.lead_sweeps is not None
                assert f.lead_sweeps == (f.slow_at - f.at) // DAY  # nightly: sweeps = days


def test_the_lead_counts_sweeps_from_the_warning_to_the_slow_sweep() -> None:
    """One series by hand: warned at sweep d, SLOW in sweep s: lead s - d (the cluster test's
    count), days between; the replay at d alone (points up to d) already said DECLINING."""
    _, ratios = HEALTHY[0]
    points = nightly(falling(ratios[:30], 0.93))
    s = score_node("node07", {SEQ_READ: points}, judged(points), RULE, points[-1].at)
    (flag,) = s.flags
    first_slow = next(k for k, p in enumerate(points) if p.ratio < 0.5)
    assert flag.outcome is Outcome.CONFIRMED and flag.slow_at == points[first_slow].at
    assert flag.lead_sweeps == first_slow - flag.sweep >= 3
    assert flag.lead_days == pytest.approx(first_slow - flag.sweep)
    assert flag.at == points[flag.sweep].at and s.misses == ()
    alone = declining("node07", points[: flag.sweep + 1], 0.5, RULE.horizon)
    before = declining("node07", points[: flag.sweep], 0.5, RULE.horizon)
    assert alone.status is TrendStatus.DECLINING and before.status is not TrendStatus.DECLINING
    assert alone.reason == flag.reason


def test_the_replay_never_looks_ahead() -> None:
    """Each sweep's replay is exactly `declining` over the points up to it, and sweeps or
    verdicts added later change no earlier replay nor an earlier outcome."""
    _, ratios = HEALTHY[7]
    points = nightly(falling(ratios[:24], 0.94))
    rows = replay("n", {SEQ_READ: points}, RULE)
    assert [t for t, _ in rows] == [p.at for p in points]
    for k, (_, (v,)) in enumerate(rows):
        assert v == declining("n", points[: k + 1], 0.5, RULE.horizon, figure=SEQ_READ)
    assert replay("n", {SEQ_READ: points[:15]}, RULE) == rows[:15]
    cut = points[14].at
    early = score_node("n", {SEQ_READ: points[:15]}, judged(points[:15]), RULE, cut)
    whole = score_node("n", {SEQ_READ: points}, judged(points), RULE, points[-1].at)
    assert early.flags and early.flags[0].outcome is Outcome.PENDING  # not SLOW by sweep 14
    assert replace(early.flags[0], outcome=Outcome.CONFIRMED) == replace(
        whole.flags[0], slow_at=None, lead_sweeps=None, lead_days=None
    )


def test_a_step_change_is_missed_as_a_step_and_too_few_sweeps_say_so() -> None:
    """Slow from one sweep on: SLOW at once by the rules, no warning before, "step change";
    a node SLOW at its third sweep: "too few sweeps" (the replay had no forecast)."""
    _, ratios = HEALTHY[2]
    step = nightly(ratios[:10] + [r * 0.3 for r in ratios[10:16]])
    s = score_node("n", {SEQ_READ: step}, judged(step), RULE, step[-1].at)
    (miss,) = s.misses
    assert (miss.why, miss.slow_at, miss.sweeps_before) == (Why.STEP, step[10].at, 10)
    assert "no fall beyond the noise" in miss.reason and s.flags == ()
    young = nightly([ratios[0], ratios[1], 0.2, 0.2])
    (few,) = score_node("n", {SEQ_READ: young}, judged(young), RULE, young[-1].at).misses
    assert few.why is Why.TOO_FEW and "no forecast" in few.reason
    (none,) = score_node("n", {}, [StatusAt(T0, SLOW)], RULE, T0).misses
    assert none.why is Why.TOO_FEW and none.reason == "no sweep before it"


def test_a_warning_never_followed_by_slow_is_false_once_its_horizon_passed() -> None:
    """A decline that stops short of the line: pending while the horizon may still bring the
    SLOW, false after it; a SLOW far later, after the sweeps stopped, is a miss, late."""
    _, ratios = HEALTHY[4]
    values = falling(ratios[:14], 0.93) + [0.62 * r for r in ratios[14:40]]
    points = nightly(values)
    some = points[:16]
    (flag,) = score_node("n", {SEQ_READ: some}, judged(some), RULE, some[-1].at).flags
    assert flag.outcome is Outcome.PENDING and flag.level is not None and flag.level > 0.5
    later = score_node("n", {SEQ_READ: points}, judged(points), RULE, points[-1].at)
    assert [f.outcome for f in later.flags] == [Outcome.FALSE] and later.misses == ()
    assert later.flags[0].slow_at is None and later.flags[0].lead_sweeps is None
    tail = nightly(falling(ratios[:11], 0.95, after=1))
    verdicts = [StatusAt(p.at, OK) for p in tail] + [StatusAt(tail[-1].at + 30 * DAY, SLOW)]
    s = score_node("n", {SEQ_READ: tail}, verdicts, RULE, tail[-1].at + 30 * DAY)
    assert [f.outcome for f in s.flags] == [Outcome.FALSE], s
    (late,) = s.misses
    assert late.why is Why.LATE and late.sweeps_before == 11 and "crosses 0.5x" in late.reason


def test_a_node_flapping_about_the_line_is_one_episode_and_unknown_changes_nothing() -> None:
    """SLOW, OK, UNKNOWN, SLOW within the horizon: one onset, one warning confirmed; once
    repaired (OK) and a horizon on, a SLOW is a new onset: missed if not warned."""
    _, ratios = HEALTHY[9]
    points = nightly(falling(ratios[:30], 0.92))
    verdicts = judged(points)
    first = next(k for k, v in enumerate(verdicts) if v.status is SLOW)
    verdicts[first + 1] = StatusAt(verdicts[first + 1].at, OK)
    verdicts[first + 2] = StatusAt(verdicts[first + 2].at, Status.UNKNOWN)
    s = score_node("n", {SEQ_READ: points}, verdicts, RULE, points[-1].at)
    assert [f.outcome for f in s.flags] == [Outcome.CONFIRMED] and s.misses == ()
    end = points[-1].at
    again = [*verdicts, StatusAt(end + 2 * DAY, OK), StatusAt(end + 20 * DAY, SLOW)]
    (miss,) = score_node("n", {SEQ_READ: points}, again, RULE, end + 20 * DAY).misses
    assert miss.why is Why.BELOW and miss.slow_at == end + 20 * DAY  # its sweeps read under
    soon = [*verdicts, StatusAt(end + 2 * DAY, OK), StatusAt(end + 10 * DAY, SLOW)]
    assert score_node("n", {SEQ_READ: points}, soon, RULE, end + 10 * DAY).misses == ()


def test_a_new_recipe_starts_over_and_only_the_window_from_start_is_counted() -> None:
    """A recipe change: the old recipe's points no longer count, so a SLOW at the new
    recipe's 4th sweep is missed as too few sweeps; with ``start`` after it, nothing before
    is counted, though those sweeps still feed the fit."""
    _, ratios = HEALTHY[11]
    old = nightly(ratios[:10], "old")
    new = nightly([*ratios[10:13], 0.3 * ratios[13]], "new", start=10)
    points = old + new
    s = score_node("n", {SEQ_READ: points}, judged(points), RULE, points[-1].at)
    assert s.flags == () and s.sweeps == 14 and s.judged == 5  # sweeps 6 to 10 had a forecast
    (miss,) = s.misses
    assert (miss.why, miss.sweeps_before) == (Why.TOO_FEW, 13)
    assert miss.reason == "n: seq read: 3 sweeps of this recipe, a forecast needs 6: no forecast"
    after = score_node(
        "n", {SEQ_READ: points}, judged(points), RULE, points[-1].at, start=points[-1].at + DAY
    )
    assert (after.sweeps, after.flags, after.misses) == (0, (), ())


def test_by_rule_adds_the_trend_row_in_the_rules_shape() -> None:
    _, ratios = HEALTHY[0]
    points = nightly(falling(ratios[:30], 0.93))
    score = summarize([score_node("n", {SEQ_READ: points}, judged(points), RULE, points[-1].at)])
    (row,) = by_rule([], [], (), score)
    assert isinstance(row, TrendRow)
    assert (row.rule, row.mode, row.fired, row.caught, row.false_alarms, row.misses) == (
        "trend",
        "shadow",
        1,
        1,
        0,
        0,
    )
    assert (row.drained, row.precision, row.pending) == (0, 1.0, 0)
    assert row.lead_sweeps == score.lead_sweeps and row.lead_sweeps is not None
    assert row.lead_sweeps >= 3
    assert by_rule([], [], (), summarize([])) == []  # no node swept: no row


# ---- through the store -----------------------------------------------------------------------


def _sweep(
    store: Store,
    when: datetime,
    reads: dict[str, float],
    status: dict[str, Status] | None = None,
    trigger: Trigger = Trigger.SWEEP,
) -> None:
    """A sweep as the pipeline records it: each node's round-1 probe (the captured real fio
    output, its seq read set to ``reads`` MB/s), the round's peer median and the verdicts."""
    nodes = sorted(reads)
    run = store.start_run(trigger, nodes, {}, None, ",".join(nodes), when)
    base = full_probe()
    assert base.seq_read is not None
    for n in nodes:
        probe: NodeProbe = replace(
            base, node=n, seq_read=replace(base.seq_read, bw_bytes=reads[n] * 1e6), recipe="r1"
        )
        store.record_probe(run, probe, 1)
    median = sorted(reads.values())[len(reads) // 2]
    verdicts = tuple(
        Verdict(n, (status or {}).get(n, OK), "seq read", read_mb_s=reads[n], recipe="r1")
        for n in nodes
    )
    rand = base.rand_read.iops if base.rand_read else None
    store.record_verdicts(
        run, RunSummary(verdicts=verdicts, peer_read_median_mb_s=median, peer_rand_median_iops=rand)
    )
    store.finish_run(run, when + timedelta(minutes=5))


NAMES = ["node01", "node02", "node03", "node04"]


def _seed(store: Store, start: datetime, sweeps: int = 20) -> list[datetime]:
    """Four nodes' real healthy ratios; node01 falls 7 % a sweep from its 7th sweep and is
    SLOW_READ (in the sweep) once under half its peers; node04 steps to 0.3x at sweep 14 and
    is SLOW_READ at once; an in-job run's SLOW verdict of node02 is no screening verdict."""
    times = []
    for k in range(sweeps):
        when = start + k * DAY
        reads = {n: 300.0 * HEALTHY[i][1][k] for i, n in enumerate(NAMES)}
        reads["node01"] *= 0.93 ** max(0, k - 5)
        if k >= 14:
            reads["node04"] *= 0.3
        median = sorted(reads.values())[len(reads) // 2]
        status = {n: SLOW if r / median < 0.5 else OK for n, r in reads.items()}
        _sweep(store, when, reads, status)
        times.append(when)
    job = store.start_run(Trigger.JOB, ["node02"], {}, "77", "node02", start + 3 * DAY)
    store.record_verdicts(job, RunSummary((Verdict("node02", SLOW, "in-job r_await"),)))
    store.finish_run(job, start + 3 * DAY)
    return times


def test_the_store_scores_each_swept_node_as_of_each_sweep(db_store: Store) -> None:
    times = _seed(db_store, T0)
    policy = Policy(trend=TrendPolicy(since_days=30))
    seen = node_statuses(db_store, None, T0)
    assert set(seen) == set(NAMES) and len(seen["node02"]) == 20  # the in-job run left out
    assert [v.at for v in seen["node01"]] == times
    scores = {s.node: s for s in trend_scores(db_store, policy, T0, times[-1])}
    assert set(scores) == set(NAMES)
    (flag,) = scores["node01"].flags
    assert flag.outcome is Outcome.CONFIRMED and flag.lead_sweeps is not None
    assert flag.lead_sweeps >= 3 and flag.level is not None and flag.level > 0.5
    assert flag.slow_at == next(v.at for v in seen["node01"] if v.status is SLOW)
    (step,) = scores["node04"].misses
    assert (step.why, step.slow_at) == (Why.STEP, times[14])
    assert all(not scores[n].flags and not scores[n].misses for n in ("node02", "node03"))
    # as of each sweep: what node_trends said right after it, in a store built sweep by sweep
    assert scores["node01"].declining >= 1
    total = summarize(scores.values())
    assert (total.warnings, total.confirmed, total.false, total.missed) == (1, 1, 0, 1)
    assert total.missed_why == {"step change": 1} and total.sweeps == 80


def test_the_replay_is_what_node_trends_said_after_each_sweep(tmp_path: Path) -> None:
    """The store filled one sweep at a time, node_trends asked after each (what `screener
    trend` printed that night); the replay over the finished store says the same."""
    policy = Policy(trend=TrendPolicy(since_days=30))
    live: list[set[str]] = []
    with open_store(f"sqlite:///{tmp_path}/live.db", upgrade=True) as store:
        for k in range(20):
            reads = {n: 300.0 * HEALTHY[i + 8][1][k] for i, n in enumerate(NAMES)}
            reads["node02"] *= 0.92 ** max(0, k - 5)
            _sweep(store, T0 + k * DAY, reads)
            said = node_trends(store, policy, T0 + k * DAY + timedelta(hours=1))
            live.append({v.node for v in said if v.status is TrendStatus.DECLINING})
        scores = trend_scores(store, policy, T0, T0 + 20 * DAY)
    rule = trend_rule(policy)
    with open_store(f"sqlite:///{tmp_path}/live.db") as store:
        series = {s.node: s.points for s in node_series(store, None, T0 - DAY)}
    replayed = {n: replay(n, ps, rule) for n, ps in series.items()}
    said = [
        {
            n
            for n, rows in replayed.items()
            if TrendStatus.DECLINING in {v.status for v in rows[k][1]}
        }
        for k in range(20)
    ]
    assert said == live and {"node02"} in live
    first = live.index({"node02"})
    (flag,) = [f for s in scores for f in s.flags]
    assert flag.node == "node02" and flag.sweep == first and flag.outcome is Outcome.PENDING


# ---- `screener accuracy --by rule` -----------------------------------------------------------


def _accuracy(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SCREENER_CONFIG"}
    return cli_fork.run(
        ["accuracy", "--by", "rule", *args],
        timeout=120,
        env={**env, "SCREENER_DATABASE_URL": url, "COLUMNS": "100"},
    )


def test_accuracy_by_rule_shows_the_trend_row_from_the_sweeps(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/screener.db"
    start = datetime.now(UTC) - 25 * DAY
    with open_store(url, upgrade=True) as store:
        times = _seed(store, start)
    done = _accuracy(url, "--since", "30d", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (row,) = doc["rows"]  # no job ingested: the trend's row alone
    assert {k: row[k] for k in ("rule", "mode", "fired", "caught", "false_alarms", "misses")} == {
        "rule": "trend",
        "mode": "shadow",
        "fired": 1,
        "caught": 1,
        "false_alarms": 0,
        "misses": 1,
    }
    assert row["drained"] == 0 and row["precision"] == 1.0 and row["pending"] == 0
    assert row["lead_sweeps"] >= 3 and row["lead_days"] == pytest.approx(row["lead_sweeps"])
    trend = doc["trend"]
    assert trend["nodes"] == 4 and trend["missed_why"] == {"step change": 1}
    (warned,) = trend["warnings_per_node"]
    assert warned["node"] == "node01" and warned["outcome"] == "CONFIRMED"
    assert [m["node"] for m in trend["misses_per_node"]] == ["node04"]
    assert "never drains" in trend["note"] and trend["horizon_days"] == 14
    # a window with the last 2 sweeps only: the warning, its SLOW and the step are older
    late = json.loads(_accuracy(url, "--since", "8d", "--json").stdout)
    (row,) = late["rows"]
    assert (row["fired"], row["misses"], late["trend"]["sweeps"]) == (0, 0, 8)
    assert times[-1] - times[0] == 19 * DAY
    # a window after the last sweep: no sweep to judge, no row, and the sentence says so
    empty = _accuracy(url, "--since", "5d")
    assert empty.returncode == 0 and "nothing to score since" in empty.stdout
    table = _accuracy(url, "--since", "30d")
    assert table.returncode == 0, table.stderr
    out = " ".join(table.stdout.split())  # the words as read, whatever the terminal folds
    assert "trend shadow 1 1 0 1 0 1.00" in out, out  # the rules' columns, in their order
    assert "4 nodes, 60 of 80 sweeps with a forecast; 1 warning on 1 node: 1 then" in out, out
    assert "SLOW_READ within 14d, 0 false, 0 pending; median lead " in out, out
    assert "1 missed (1 step change)" in out and "trend missed node04: SLOW_READ" in out, out
    assert "trend warned node01 " in out and "sweeps later" in out, out
