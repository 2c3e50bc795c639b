"""The early-warning fit (issue 46), pure, over figures the project captured: the benches'
healthy round-1 ratios (tests/data/trend/bench_healthy_round1.json: unpaced emulated nodes,
a 2x spread within a run) and, for declines, those same real ratios times a falling factor,
so the noise is this machine's and only the trend is made."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import statistics
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from screener.policy import Policy, TrendPolicy
from screener.probe.fio import parse_fio
from screener.probe_data import (
    FioJobResult,
    NodeProbe,
    RunSummary,
    SmartLog,
    Status,
    Trigger,
    Verdict,
)
from screener.store import Store, open_store
from screener.store.trend import (
    MEDIA_ERRORS,
    PCT_USED,
    RAND_READ,
    READ_P99,
    SEQ_READ,
    STALL_SHARE,
    node_series,
    node_trends,
)
from screener.verdict.trend import (
    Point,
    Scale,
    TrendStatus,
    counting,
    current_series,
    declining,
    fit,
    short_words,
)
from tests import cli_fork
from tests.store_data import FACTS, full_probe

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


# ---- read p99, stall share, SMART counters ---------------------------------------------------

STALLS = Path(__file__).parent / "data" / "probe" / "stalls"
TAIL_LINE, SHARE_LINE = (
    4.0,
    5.0,
)  # tail rule's tail_min_factor, slow_ios' max_slow_fraction (points)


def _round(name: str) -> dict[str, FioJobResult]:
    """One captured probe round of the 8-node emulated cluster: each node's seq read."""
    raw = json.loads(gzip.decompress((STALLS / name).read_bytes()))
    jobs = {n: parse_fio(text, n).job("seq_read") for n, text in sorted(raw.items())}
    return {n: j for n, j in jobs.items() if j is not None}


def _p99_ratios(name: str) -> dict[str, float]:
    jobs = _round(name)
    med = statistics.median(j.lat_p99_ns for j in jobs.values())
    return {n: j.lat_p99_ns / med for n, j in jobs.items()}


FULL_ROUNDS = ("healthy_with_hiccup.json.gz", "light_150ms_every_1s.json.gz")
HEAVY = "heavy_500ms_every_1.5s.json.gz"


def _p99(ratios: list[float]) -> list[float]:
    """A healthy node's p99 over the peers' as its read ratios give it: its reads wait
    1/r as long (fixed queue depth, Little's law); noise as wide as the reads' (below)."""
    return [1 / r for r in ratios]


def test_captured_p99_noise_is_no_wider_than_the_read_series_it_borrows() -> None:
    """The premise of the p99 tests: a healthy node's p99 over its round's median spreads
    about as its read ratio does in the same captured rounds, and far less than the
    benches' read series used as p99 noise below (which span 2x and more)."""
    p99, reads = [], []
    for name in (*FULL_ROUNDS, HEAVY):
        jobs = _round(name)
        med_bw = statistics.median(j.bw_bytes for j in jobs.values())
        for n, r in _p99_ratios(name).items():
            if not jobs[n].stall_ios or jobs[n].stall_ns < 100e6:  # the stallers are no noise
                p99.append(math.log(r))
                reads.append(math.log(jobs[n].bw_bytes / med_bw))
    assert len(p99) == 22
    spread = statistics.pstdev(p99)
    assert spread < 1.5 * statistics.pstdev(reads)
    assert spread < statistics.pstdev(math.log(r) for _, rs in HEALTHY for r in rs) / 2
    assert max(p99) < math.log(1.25) and min(p99) > math.log(0.85)


def test_no_window_of_a_healthy_p99_series_is_declining() -> None:
    flagged, windows = [], 0
    for name, ratios in HEALTHY:
        points = nightly(_p99(ratios))
        for k in range(6, len(points) + 1):
            windows += 1
            v = declining("n", points[:k], TAIL_LINE, HORIZON, figure=READ_P99, scale=Scale.RISING)
            if v.status is TrendStatus.DECLINING:
                flagged.append((name, k, v.reason))
    assert windows > 800 and flagged == []


@pytest.mark.parametrize("rate", [1.08, 1.12])
def test_a_steadily_rising_p99_is_flagged_sweeps_before_the_tail_line(rate: float) -> None:
    """Real noise times a p99 growing 8 or 12 % a sweep: flagged while under 4x the peers',
    with a median lead of >= 3 sweeps before the first sweep over the tail rule's line."""
    leads, missed = [], []
    for name, ratios in HEALTHY:
        values = [r * rate**k for k, r in enumerate(_p99(ratios[:40]))]
        first_slow = next((k for k, v in enumerate(values) if v > TAIL_LINE), None)
        if first_slow is None or first_slow < 9:
            continue
        points = nightly(values)
        verdicts = [
            declining("n", points[:k], TAIL_LINE, HORIZON, figure=READ_P99, scale=Scale.RISING)
            for k in range(6, first_slow + 1)
        ]
        first = next((v for v in verdicts if v.status is TrendStatus.DECLINING), None)
        if first is None:
            missed.append(name)
            continue
        assert first.level is not None and first.level < TAIL_LINE
        assert first.per_sweep is not None and first.per_sweep > 0
        leads.append(first_slow - (first.sweeps - 1))
    assert len(leads) >= 10 and len(missed) <= 2, (leads, missed)
    assert sorted(leads)[len(leads) // 2] >= 3, leads


def test_rising_p99_words_read_as_the_tail_rule_reads_it() -> None:
    _, ratios = HEALTHY[0]
    points = nightly([r * 1.15**k for k, r in enumerate(_p99(ratios[:10]))])
    v = declining("node07", points, TAIL_LINE, HORIZON, figure=READ_P99, scale=Scale.RISING)
    assert v.status is TrendStatus.DECLINING and v.scale is Scale.RISING, v.reason
    m = re.fullmatch(
        r"node07: read p99 (\d\.\d\d)x peers, rising (\d\.\d\d)x per sweep; "
        r"crosses 4x in ~(\d+) sweeps \(~\d{4}-\d\d-\d\d\)",
        v.reason,
    )
    assert m and 2 < float(m[1]) < 4 and float(m[2]) > 0.2, v.reason
    assert v.crosses_at == points[-1].at + timedelta(days=v.days_to_cross or 0)
    assert short_words(v).startswith(f"read p99 {m[1]}x peers, +")
    over = declining("n", nightly([5.0] * 8), TAIL_LINE, HORIZON, scale=Scale.RISING)
    assert over.status is TrendStatus.BELOW and "at or above the 4x line" in over.reason


@pytest.mark.parametrize("at", [11, 6, 9])
def test_a_single_p99_spike_is_not_declining(at: int) -> None:
    """The heavy staller's captured round (p99 11x its peers' in one sweep) dropped into a
    healthy series: one odd sweep does not bend the fit, wherever it falls."""
    spike = _p99_ratios(HEAVY)["node04"]
    assert spike > 10
    for _, ratios in HEALTHY[:8]:
        values = _p99(ratios[:12])
        values[at] = spike
        v = declining("n", nightly(values), TAIL_LINE, HORIZON, figure=READ_P99, scale=Scale.RISING)
        assert v.status is TrendStatus.STEADY, v.reason
        assert v.level is not None and v.level < 1.6, v.reason


def _stall_step() -> float:
    """The share of a 2 s seq read one stall of the whole queue takes: the light staller's
    captured round (95 reads >= 100 ms in ~3 stalls), per stall."""
    job = _round("light_150ms_every_1s.json.gz")["node04"]
    stalls = round(job.stall_ios / job.iodepth)
    assert stalls == 3 and 0.02 < job.slow_fraction < 0.03
    return job.slow_fraction / stalls * 100  # points


def test_a_stall_share_growing_a_stall_every_other_sweep_is_flagged_before_the_line() -> None:
    """A device stalling once more every second sweep (each stall the captured ~0.9 points):
    DECLINING while still under slow_ios' +5 points, sweeps before it crosses them."""
    step = _stall_step()
    values = [(k // 2) * step for k in range(16)]
    first_over = next(k for k, v in enumerate(values) if v > SHARE_LINE)
    verdicts = [
        declining("node07", nightly(values[:k]), SHARE_LINE, HORIZON, figure=STALL_SHARE,
                  scale=Scale.SHARE)
        for k in range(6, first_over + 1)
    ]  # fmt: skip
    first = next(v for v in verdicts if v.status is TrendStatus.DECLINING)
    assert first.level is not None and first.level < SHARE_LINE
    assert first_over - (first.sweeps - 1) >= 3, first.reason
    assert re.fullmatch(
        r"node07: stall share \+\d\.\d points over peers, rising 0\.\d\d points per sweep; "
        r"crosses \+5\.0 points in ~\d+ sweeps \(~\d{4}-\d\d-\d\d\)",
        first.reason,
    ), first.reason
    past = declining("n", nightly([8.0] * 8), SHARE_LINE, HORIZON, scale=Scale.SHARE)
    assert past.status is TrendStatus.BELOW and "+5.0 points line" in past.reason


def _excess_shares(name: str) -> dict[str, float]:
    """Each node's share of seq reads >= 100 ms minus the round's median share, in points."""
    jobs = _round(name)
    med = statistics.median(j.slow_fraction for j in jobs.values())
    return {n: (j.slow_fraction - med) * 100 for n, j in jobs.items()}


def test_quiet_shares_and_one_queue_spike_are_steady() -> None:
    """The captured healthy node-rounds' shares over their peers' are 0: the series a
    healthy node makes; with the triage capture's one wait of a whole queue (node06, 5
    points) in any one sweep it stays STEADY at 0, however close to the line that spike."""
    healthy = [
        v
        for name in (*FULL_ROUNDS, HEAVY)
        for n, v in _excess_shares(name).items()
        if n != "node04"  # the staller of the throttled rounds
    ]
    assert len(healthy) == 21 and set(healthy) == {0.0}
    spike = _excess_shares("triage_qd8_one_hiccup.json.gz")["node06"]
    assert 4.5 < spike < 5.5
    for at in (0, 5, 11):
        values = healthy[:12]
        values[at] = spike
        v = declining("n", nightly(values), SHARE_LINE, HORIZON, scale=Scale.SHARE)
        assert v.status is TrendStatus.STEADY and v.level == 0.0, v.reason
        assert "no rise beyond the noise (+0.00..+0.00 points per sweep)" in v.reason
    below = nightly([-2.0, -1.0, -2.0, -1.0, -2.0, -1.0])  # under the peers' share: kept
    negative = declining("n", below, SHARE_LINE, HORIZON, scale=Scale.SHARE)
    assert negative.sweeps == 6 and negative.status is TrendStatus.STEADY


@pytest.mark.parametrize(("figure", "scale", "line", "old"), [
    (READ_P99, Scale.RISING, TAIL_LINE, [1.0 * 1.15**k for k in range(8)]),
    (STALL_SHARE, Scale.SHARE, SHARE_LINE, [0.6 * k for k in range(8)]),
])  # fmt: skip
def test_a_new_recipe_starts_a_new_series_for_p99_and_stall_share(
    figure: str, scale: Scale, line: float, old: list[float]
) -> None:
    flat = [1.0] * 12 if scale is Scale.RISING else [0.0] * 12
    before = declining("n", nightly(old, "old"), line, HORIZON, figure=figure, scale=scale)
    assert before.status is TrendStatus.DECLINING, before.reason
    points = nightly(old, "old") + nightly(flat[:4], "new", start=8)
    v = declining("n", points, line, HORIZON, figure=figure, scale=scale)
    assert (v.status, v.sweeps, v.recipe) == (TrendStatus.TOO_FEW, 4, "new"), v.reason
    assert v.reason == f"n: {figure}: 4 sweeps of this recipe, a forecast needs 6: no forecast"
    later = declining("n", nightly(old, "old") + nightly(flat, "new", start=8), line, HORIZON,
                      figure=figure, scale=scale)  # fmt: skip
    assert later.status is TrendStatus.STEADY and later.sweeps == 12 and later.recipe == "new"


def test_a_linear_fit_is_exact_on_a_clean_line_and_keeps_zero_and_negative_values() -> None:
    clean = fit(nightly([-0.01 + 0.004 * k for k in range(8)]), log=False)
    assert clean is not None
    assert math.isclose(clean.slope, 0.004) and math.isclose(clean.low, clean.high)
    assert math.isclose(clean.level, -0.01 + 0.004 * 7)
    junk = nightly([0.0, -0.5, math.nan, math.inf, 0.1])
    assert [p.ratio for p in current_series(junk, positive=False)] == [0.0, -0.5, 0.1]
    with pytest.raises(ValueError, match="counting"):
        declining("n", junk, 1.0, HORIZON, scale=Scale.COUNTER)


# SMART counters: there is no NVMe on this machine (tests/data/probe/facts/README.md), so
# these counts are hand-made; a counter has no noise, only whole readings.


def test_wear_forecast_to_100_percent_used() -> None:
    """A drive wearing 1 % every 2 days from 90 %: crosses 100 % within the horizon;
    wearing 1 % a month at 97 %: not within it; at 100 %: the facts rule's business."""
    fast = nightly([90 + k // 2 for k in range(14)])
    v = counting("node07", fast, 100.0, HORIZON, figure=PCT_USED, unit_text="%")
    assert v.status is TrendStatus.DECLINING and v.scale is Scale.COUNTER, v.reason
    assert re.fullmatch(
        r"node07: percentage used 96%, rising 0\.46% per sweep; crosses 100% in ~9 sweeps "
        r"\(~\d{4}-\d\d-\d\d\)",
        v.reason,
    ), v.reason
    assert v.days_to_cross is not None and 8 < v.days_to_cross < 9
    assert v.crosses_at == fast[-1].at + timedelta(days=v.days_to_cross)
    horizon = timedelta(days=30)
    assert counting("n", fast, 100.0, horizon).status is TrendStatus.DECLINING
    slow = nightly([97 + k // 30 for k in range(40)])
    s = counting("n", slow, 100.0, horizon, unit_text="%")
    assert s.status is TrendStatus.STEADY and "not surely within the 30d horizon" in s.reason
    worn = counting("n", nightly([99, 99, 100, 100, 100, 101]), 100.0, horizon, unit_text="%")
    assert worn.status is TrendStatus.BELOW and "the facts rule's business" in worn.reason
    flat = counting("n", nightly([3] * 8), 100.0, horizon)
    assert (
        flat.status is TrendStatus.STEADY
        and flat.reason == "n: percentage used 3, not rising over 8 sweeps"
    )


def test_a_counter_falls_only_for_a_new_drive_and_spans_recipes() -> None:
    """Swapped at sweep 10: the old drive's wear is another drive's. A recipe change does
    not restart a counter: the drive is the same."""
    worn = [86 + k // 2 for k in range(10)]
    swapped = nightly(worn) + nightly([0, 0, 0], start=10)
    v = counting("n", swapped, 100.0, HORIZON)
    assert v.status is TrendStatus.TOO_FEW and v.sweeps == 3 and v.level is None
    assert v.reason == "n: percentage used: 3 sweeps with it, a forecast needs 6: no forecast"
    mixed = nightly(worn[:5], "old") + nightly(worn[5:], "new", start=5)
    assert counting("n", mixed, 100.0, HORIZON).sweeps == 10


def test_media_errors_warn_at_any_rise_in_the_window() -> None:
    """The line is any new one (one media error already makes the node DEGRADED): a rise
    within the window is DECLINING at once (0 days), none new past the line is BELOW."""
    hot = 14  # the captured nvme-cli 2.x sample's count (tests/data/probe/facts)
    rising = nightly([hot] * 5 + [hot + 1, hot + 1, hot + 3])
    v = counting("node07", rising, 1.0, HORIZON, figure=MEDIA_ERRORS, any_rise=True)
    assert v.status is TrendStatus.DECLINING and v.days_to_cross == 0.0, v.reason
    assert v.reason == (
        "node07: media errors 17, up 3 over the last 8 sweeps (~0.43 per sweep): "
        "the drive keeps finding them"
    )
    assert (
        v.crosses_at == rising[-1].at and short_words(v) == "media errors 17, +0.43/sweep, rising"
    )
    two = counting("n", nightly([0, 1]), 1.0, HORIZON, figure=MEDIA_ERRORS, any_rise=True)
    assert two.status is TrendStatus.DECLINING
    old = nightly([hot] + [hot + 2] * 14)
    quiet = counting("n", old, 1.0, HORIZON, figure=MEDIA_ERRORS, any_rise=True, window=12)
    assert quiet.status is TrendStatus.BELOW and "none new over the last 12 sweeps" in quiet.reason
    none = counting("n", nightly([0] * 8), 1.0, HORIZON, figure=MEDIA_ERRORS, any_rise=True)
    assert none.status is TrendStatus.STEADY
    one = counting("n", nightly([0]), 1.0, HORIZON, figure=MEDIA_ERRORS, any_rise=True)
    assert one.status is TrendStatus.TOO_FEW and "a rise needs 2" in one.reason


# ---- the store's series (screener/store/trend.py) -------------------------------------------


def _sweep(
    store: Store,
    when: datetime,
    reads: dict[str, float],
    recipe: str = "r1",
    trigger: Trigger = Trigger.SWEEP,
    error: str = "",
    p99_ms: dict[str, float] | None = None,
    slow: dict[str, float] | None = None,
    smart: dict[str, SmartLog | None] | None = None,
) -> int:
    """A sweep as the pipeline records it: each node's round-1 probe (the captured real fio
    output, its seq read set to ``reads`` MB/s, and where given its seq-read p99, its share
    of reads >= 100 ms and its SMART log: None, no SMART), the verdicts and the round's
    peer median."""
    nodes = sorted(reads)
    run = store.start_run(trigger, nodes, {}, None, ",".join(nodes), when)
    base = full_probe()
    assert base.seq_read is not None
    for n in nodes:
        seq = replace(base.seq_read, bw_bytes=reads[n] * 1e6)
        if p99_ms and n in p99_ms:
            seq = replace(seq, lat_p99_ns=p99_ms[n] * 1e6)
        if slow and n in slow:
            seq = replace(seq, slow_fraction=slow[n])
        facts = FACTS if smart is None or n not in smart else replace(FACTS, smart=smart[n])
        probe: NodeProbe = replace(base, node=n, seq_read=seq, recipe=recipe, facts=facts)
        if error and n == nodes[0]:
            probe = NodeProbe(node=n, error=error, error_kind="unreachable", duration_s=1.0)
        store.record_probe(run, probe, 1)
        if not error:  # a round 2 beside references: another yardstick, never a point
            odd = replace(seq, bw_bytes=1.0, lat_p99_ns=9e9, slow_fraction=0.9)
            store.record_probe(run, replace(probe, seq_read=odd), 2)
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
    # a forecast needs 20 sweeps; a new media error needs no forecast, only two readings
    assert {v.figure: v.status for v in few} == {
        **{f: TrendStatus.TOO_FEW for f in (SEQ_READ, RAND_READ, READ_P99, STALL_SHARE)},
        PCT_USED: TrendStatus.TOO_FEW,
        MEDIA_ERRORS: TrendStatus.STEADY,
    }, [v.reason for v in few]


def test_the_store_gives_p99_stall_share_and_smart_against_the_run(db_store: Store) -> None:
    """p99 over the median p99 of the run's round-1 seq reads (the same whether or not the
    peers are asked for), the share of slow reads minus their median share, SMART as read
    (none for a node without it); round 2 never a point, a failed probe never one."""
    peers = {"node02": 300.0, "node03": 310.0, "node04": 290.0}
    p99s = [{"node01": 40.0, "node02": 20.0, "node03": 25.0, "node04": 30.0},
            {"node01": 90.0, "node02": 30.0, "node03": 30.0, "node04": 30.0}]  # fmt: skip
    slows = [{"node01": 0.02, "node02": 0.0, "node03": 0.01, "node04": 0.0},
             {"node01": 0.07, "node02": 0.02, "node03": 0.02, "node04": 0.01}]  # fmt: skip
    for i in range(2):
        smart = {"node01": SmartLog(0, 40.0, 14 + i, 96 + i), "node04": None}
        _sweep(db_store, T0 + timedelta(days=i), {"node01": 300.0, **peers}, recipe=f"r{i}",
               p99_ms=p99s[i], slow=slows[i], smart=smart)  # fmt: skip
    failed = {"node01": 300.0, **peers}
    _sweep(db_store, T0 + timedelta(days=2), failed, error="unreachable", smart={"node04": None})
    (one,) = node_series(db_store, ["node01"], T0)
    every = {x.node: x for x in node_series(db_store, None, T0)}
    assert every["node01"] == one
    assert [(round(p.ratio, 3), p.recipe) for p in one.points[READ_P99]] == [
        (round(40 / 27.5, 3), "r0"),
        (3.0, "r1"),
    ]
    assert [round(p.ratio, 4) for p in one.points[STALL_SHARE]] == [1.5, 5.0]  # points
    assert [p.ratio for p in one.points[PCT_USED]] == [96.0, 97.0]
    assert [p.ratio for p in one.points[MEDIA_ERRORS]] == [14.0, 15.0]
    assert every["node04"].points[PCT_USED] == every["node04"].points[MEDIA_ERRORS] == []
    shares = [round(p.ratio, 4) for p in every["node04"].points[STALL_SHARE]]
    assert shares == [-0.5, -1.0, 0.0]  # the failed sweep's peers: the captured probe's
    assert all(len(one.points[f]) == 2 for f in (SEQ_READ, RAND_READ))


def test_node_trends_flags_rising_p99_stall_share_and_media_errors_only(
    db_store: Store,
) -> None:
    """Real healthy ratios as every node's reads and (Little's law) p99s; node01's p99
    grows 15 % a sweep, node02 stalls once more every other sweep, node03's drive finds a
    new media error, node04 has no SMART: each warned of its own figure and nothing else."""
    names = ["node01", "node02", "node03", "node04"]
    step = _stall_step()
    for k in range(10):
        ratios = {n: HEALTHY[i][1][k] for i, n in enumerate(names)}
        p99 = {n: 40.0 / r for n, r in ratios.items()}
        p99["node01"] *= 1.15**k
        slow = {n: 0.0 for n in names} | {"node02": (k // 2) * step / 100}
        smart = {n: SmartLog(0, 40.0, 0, 3) for n in names} | {"node04": None}
        smart["node03"] = SmartLog(0, 40.0, 2 + (k >= 8), 3)
        reads = {n: 300.0 * r for n, r in ratios.items()}
        _sweep(db_store, T0 + timedelta(days=k), reads, p99_ms=p99, slow=slow, smart=smart)
    out = node_trends(db_store, Policy(trend=TrendPolicy(since_days=30)), T0 + timedelta(days=10))
    flagged = {(v.node, v.figure) for v in out if v.status is TrendStatus.DECLINING}
    assert flagged == {
        ("node01", READ_P99),
        ("node02", STALL_SHARE),
        ("node03", MEDIA_ERRORS),
    }, [v.reason for v in out if v.status is not TrendStatus.STEADY]
    lines = {v.figure: v.threshold for v in out}
    assert lines == {
        SEQ_READ: 0.5, RAND_READ: 0.25, READ_P99: 4.0, STALL_SHARE: 5.0,
        PCT_USED: 100.0, MEDIA_ERRORS: 1.0,
    }  # fmt: skip
    assert {v.figure for v in out if v.node == "node04"} == {
        SEQ_READ, RAND_READ, READ_P99, STALL_SHARE,
    }  # fmt: skip
    assert all(v.status is TrendStatus.STEADY for v in out if v.node == "node04")
    p99 = next(v for v in out if v.figure == READ_P99 and v.node == "node01")
    assert p99.level is not None and 2 < p99.level < 4 and p99.scale is Scale.RISING


# ---- `screener trend` ------------------------------------------------------------------------


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SCREENER_CONFIG"}
    return cli_fork.run(
        ["trend", *args],
        timeout=120,
        env={**env, "SCREENER_DATABASE_URL": url, "COLUMNS": "80"},  # an 80-column reader
    )


def test_trend_command_table_json_csv_and_one_line_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/screener.db"
    names = ["node01", "node02", "node03", "node04"]
    with open_store(url, upgrade=True) as store:
        for k in range(8):
            reads = {n: 300.0 * HEALTHY[i][1][k] for i, n in enumerate(names)}
            reads["node01"] *= 0.93**k
            when = datetime.now(UTC) - timedelta(days=8 - k)
            _sweep(store, when, reads, smart={"node04": None})  # node04: no NVMe SMART
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
    # at 80 columns every cell whole: names, the longest figure, the status, the forecast
    # day (the words below are one line each, for grep: the terminal folds them)
    for printed in (out, every.stdout):
        table = [ln for ln in printed.splitlines() if not ln.startswith("node01: ")]
        assert all(len(line) <= 80 for line in table), printed
    (row,) = [ln.split() for ln in out.splitlines() if ln.strip().startswith("node01 ")]
    assert row[:4] == ["node01", "seq", "read", "DECLINING"], row
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", row[-1]), row
    assert re.search(r"^ +node01 +percentage used +STEADY ", every.stdout, re.M), every.stdout
    rows = json.loads(_cli(url, "--json").stdout)
    assert len(rows) == 22 and rows[0]["node"] == "node01" and rows[0]["status"] == "DECLINING"
    assert {r["figure"] for r in rows} == {
        *("seq read", "rand read", "read p99", "stall share", "percentage used", "media errors")
    }
    assert {r["figure"] for r in rows if r["node"] == "node04"} == {
        *("seq read", "rand read", "read p99", "stall share")
    }  # no SMART facts: those figures left out
    assert rows[0]["crosses_at"].startswith("20") and rows[0]["sweeps"] == 8
    assert rows[0]["scale"] == "falling"
    short = json.loads(_cli(url, "--json", "--horizon", "1d").stdout)
    assert all(r["status"] != "DECLINING" for r in short)
    csv_out = _cli(url, "--csv").stdout.splitlines()
    assert csv_out[0].startswith("node,figure,status,sweeps,level,per_sweep") and len(csv_out) == 23
    assert "SMART" not in out and "SMART" not in every.stdout  # said only when asked of node04
    asked = _cli(url, "node[03-04]")
    assert asked.returncode == 0, asked.stderr
    assert "node04: no SMART facts in its sweeps: percentage used and media errors left out" in (
        asked.stdout
    ), asked.stdout
    assert "node03: no SMART" not in asked.stdout and "node[03" not in asked.stdout
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
    from screener.store.trend_marks import refresh_marks

    names = ["node01", "node02", "node03", "node04"]
    for k in range(8):
        reads = {n: 300.0 * HEALTHY[i][1][k] for i, n in enumerate(names)}
        reads["node01"] *= 0.93**k
        _sweep(db_store, T0 + timedelta(days=k), reads)
    now = T0 + timedelta(days=8)
    refresh_marks(db_store, Policy(), now)  # what the sweep job stores: the scrape reads it
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


def test_exporter_labels_each_new_figure(db_store: Store) -> None:
    """A rising p99 and a new media error reach the gauges under their figure's label."""
    from prometheus_client import CollectorRegistry

    from screener.metrics.collector import StoreCollector
    from screener.store.trend_marks import refresh_marks

    names = ["node01", "node02", "node03", "node04"]
    for k in range(8):
        ratios = {n: HEALTHY[i][1][k] for i, n in enumerate(names)}
        p99 = {n: 40.0 / r for n, r in ratios.items()}
        p99["node01"] *= 1.15**k
        smart = {n: SmartLog(0, 40.0, 0, 3) for n in names}
        smart["node02"] = SmartLog(0, 40.0, int(k >= 7), 3)
        reads = {n: 300.0 * r for n, r in ratios.items()}
        _sweep(db_store, T0 + timedelta(days=k), reads, p99_ms=p99, smart=smart)
    now = T0 + timedelta(days=8)
    refresh_marks(db_store, Policy(), now)  # what the sweep job stores: the scrape reads it
    registry = CollectorRegistry()
    registry.register(StoreCollector(db_store, clock=lambda: now))
    days = {
        (s.labels["node"], s.labels["figure"]): s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == "screener_node_trend_days_to_slow_line"
    }
    assert set(days) == {("node01", READ_P99), ("node02", MEDIA_ERRORS)}, days
    assert 0 < days[("node01", READ_P99)] < 14 and days[("node02", MEDIA_ERRORS)] == 0.0
