"""The HTML report's "Early warning" section (issue 46): the figure builder over plain
points (this machine's captured healthy round-1 ratios, tests/data/trend, one node's
falling 7 % a sweep), then a page rendered from a seeded SQLite store, opened in headless
Chromium (the Debian package) with the network off."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import plotly.graph_objects as go
import pytest
from pngpixels import count_colour
from test_report_html import CHROMIUM, CONSOLE, chromium
from trend_seed import HEALTHY, NAMES, seed_declining

from screener.policy import Policy
from screener.report.html import render, trend_section
from screener.report.trend_plot import (
    FIT_COLOUR,
    LINE_COLOUR,
    RunTrends,
    TrendPlot,
    choose,
    run_trends,
    trend_figure,
)
from screener.store import open_store, views
from screener.verdict.trend import Point, Scale, TrendStatus, declining

T0 = datetime(2026, 11, 13, 2, 0, tzinfo=UTC)
HORIZON = timedelta(days=14)


def _points(ratios: list[float], rate: float, recipe: str = "r1") -> list[Point]:
    return [
        Point(T0 + timedelta(days=k), r * rate**k, recipe, 100 + k) for k, r in enumerate(ratios)
    ]


def _trace(fig: go.Figure, name: str) -> go.Scatter:
    (trace,) = [t for t in fig.data if t.name == name]
    return trace


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def test_the_figure_draws_the_fit_the_rule_read_to_its_crossing_and_the_slow_line() -> None:
    """node01 falling 7 % a sweep beside an older recipe's sweeps: the fitted line ends at
    the decision's level on the newest sweep and reaches the slow line at its forecast date;
    the older recipe's sweeps are drawn grey, not fitted; the line is 0.5x, dashed."""
    old = [
        replace(p, at=p.at - timedelta(days=10), recipe="r0") for p in _points(HEALTHY[3][:3], 1)
    ]
    points = old + _points(HEALTHY[0][:8], 0.93)
    v = declining("node01", points, 0.5, HORIZON)
    assert v.status is TrendStatus.DECLINING and v.crosses_at is not None, v.reason
    assert v.level is not None
    fig = trend_figure(TrendPlot(v, tuple(points)), window=12, confidence=0.9, run_id=107)

    fitted, grey = _trace(fig, "sweeps fitted (8)"), _trace(fig, "earlier sweeps (not fitted)")
    assert len(grey.x) == 3 and {p.recipe for p in old} == {"r0"}
    assert list(fitted.y) == [p.ratio for p in points[3:]]
    assert list(_trace(fig, "this run (107)").x) == [points[-1].at]
    fit = _trace(fig, "Theil-Sen fit")
    assert list(fit.x) == [points[3].at, points[-1].at]
    assert math.isclose(fit.y[-1], v.level, rel_tol=1e-9)
    assert fit.y[0] > 1.0 > fit.y[-1]  # it falls: from about the peers down to 0.6x
    ahead = _trace(fig, "forecast")
    assert list(ahead.x) == [points[-1].at, v.crosses_at]
    assert math.isclose(ahead.y[-1], 0.5, rel_tol=1e-6)  # the crossing is on the line
    band = _trace(fig, "slope band (90%), from the newest fit")
    assert band.fill == "toself" and band.y[0] == v.level
    assert (
        band.y[2] < 0.5 < band.y[1]
    )  # the slowest fall allowed reaches it later, the fastest sooner

    line = _trace(fig, "slow line 0.5x")
    assert list(line.y) == [0.5, 0.5] and line.line.dash == "dash"
    assert line.line.color == LINE_COLOUR and list(line.x) == [grey.x[0], v.crosses_at]
    assert fig.layout.yaxis.type == "log"
    lo, hi = fig.layout.yaxis.range
    assert lo < math.log10(0.5) and hi > math.log10(max(p.ratio for p in points))
    assert fig.layout.title.text == "node01 seq read x peers"
    assert fig.layout.title.subtitle.text.startswith("seq read 0.")


def test_a_stall_share_is_plotted_in_points_on_a_linear_axis() -> None:
    """A SHARE figure: linear, its line +5 points above, the fit ending at its level."""
    points = [Point(T0 + timedelta(days=k), 0.4 * k + 0.05 * (k % 2), "r1") for k in range(8)]
    v = declining(
        "node02", points, 5.0, HORIZON, figure="stall share", scale=Scale.SHARE, min_sweeps=6
    )
    assert v.status is TrendStatus.DECLINING and v.level is not None, v.reason
    fig = trend_figure(TrendPlot(v, tuple(points)), window=12, confidence=0.9)
    assert fig.layout.yaxis.type != "log" and fig.layout.title.text.startswith("node02 stall")
    assert math.isclose(_trace(fig, "Theil-Sen fit").y[-1], v.level, rel_tol=1e-9)
    assert list(_trace(fig, "slow line +5 points").y) == [5.0, 5.0]
    assert math.isclose(_trace(fig, "forecast").y[-1], 5.0, rel_tol=1e-9)


def test_choose_plots_declining_only_soonest_first_and_says_so_when_none() -> None:
    falls = {n: _points(HEALTHY[i][:8], rate) for i, (n, rate) in enumerate(
        (("node01", 0.95), ("node02", 0.92), ("node03", 1.0)))}  # fmt: skip
    few = _points(HEALTHY[3][:4], 0.8)  # 4 sweeps: TOO_FEW, not fitted
    decided = [(declining(n, p, 0.5, HORIZON), p) for n, p in falls.items()]
    decided.append((declining("node04", few, 0.5, HORIZON), few))
    statuses = [v.status for v, _ in decided]
    assert statuses == [TrendStatus.DECLINING] * 2 + [TrendStatus.STEADY, TrendStatus.TOO_FEW]

    t = choose(decided, 5, window=12, confidence=0.9, horizon_days=14)
    assert [p.verdict.node for p in t.plots] == ["node02", "node01"]  # node02 crosses sooner
    assert (t.nodes, t.fitted, t.more) == (5, 3, ())
    section = "".join(trend_section(t))
    assert "2 of 5 nodes of this run declining (3 fitted)." in section
    assert section.count("Plotly.newPlot") == 2 and "node03" not in section
    capped = choose(decided, 5, window=12, confidence=0.9, horizon_days=14, limit=1)
    assert [v.node for v in capped.more] == ["node01"]
    assert "Also declining, not plotted: node01 seq read." in "".join(trend_section(capped))

    calm = choose(decided[2:], 5, window=12, confidence=0.9, horizon_days=14)
    assert calm.plots == () and "".join(trend_section(calm)) == (
        "<h2>Early warning</h2><p>No node of this run is declining (1 of 5 nodes fitted).</p>"
    )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, RunTrends], Path]:
    """A SQLite store with 8 nightly sweeps (node01 falling): the last sweep's page, and the
    trends of the last, the second last and the fourth sweep."""
    tmp = tmp_path_factory.mktemp("trend_report")
    with open_store(f"sqlite:///{tmp / 's.db'}", upgrade=True) as store:
        last = seed_declining(store, datetime(2026, 11, 20, 2, 0, tzinfo=UTC))
        out = {}
        for name, run in (("last", last), ("before", last - 1), ("early", last - 4)):
            detail = views.run_detail(store, run)
            nodes = [n.node for n in detail.nodes]
            out[name] = run_trends(store, Policy(), nodes, detail.run.started_at, run)
        detail = views.run_detail(store, last)
        page = render(detail, store.run_probes(last), trends=out["last"])
    (tmp / "last.html").write_text(page, encoding="utf-8")
    return tmp, out, tmp / "last.html"


def test_a_page_from_a_seeded_store_plots_the_declining_node_only(
    seeded: tuple[Path, dict[str, RunTrends], Path],
) -> None:
    _, trends, page = seeded
    t = trends["last"]
    assert [(p.verdict.node, p.verdict.figure) for p in t.plots] == [("node01", "seq read")]
    assert (t.nodes, t.fitted) == (4, 4)
    html = page.read_text()
    section = html[html.index("<h2>Early warning</h2>") :]
    assert "1 of 4 nodes of this run declining (4 fitted)." in section
    assert "node01 seq read x peers" in section and "this run (" in section
    assert not re.search(r"node0[234] (seq|rand) read", section)  # the steady ones: not plotted
    assert html.count("Plotly.newPlot") == 3  # bandwidth, r_await, node01's trend
    # the page of the sweep before says what the trend was then: no later sweep in it
    (before,) = trends["before"].plots
    assert max(p.at for p in before.points) < max(p.at for p in t.plots[0].points)
    assert len(before.points) == len(t.plots[0].points) - 1
    # 5 sweeps in: too few for a forecast, said in one line
    early = trends["early"]
    assert early.plots == () and all(n not in "".join(trend_section(early)) for n in NAMES)
    assert "No node of this run is declining (0 of 4 nodes fitted)." in "".join(
        trend_section(early)
    )  # its SMART media errors were read (2 sweeps do), but no probe figure was fitted


def test_chromium_draws_the_trend_plot(
    seeded: tuple[Path, dict[str, RunTrends], Path],
) -> None:
    """The whole page draws its three figures with nothing on the console; a screenshot of
    the trend figure alone (small, so reading its pixels is quick) shows the red slow line
    and the orange fit."""
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make apt` (Debian package chromium)")
    tmp, _, page = seeded
    dom = chromium(page, tmp, "--dump-dom")
    assert [ln for ln in dom.stderr.splitlines() if CONSOLE.search(ln)] == []
    assert dom.stdout.count('class="main-svg"') >= 6  # three figures, two layers each
    html = page.read_text()
    head, body = html.split("</head>", 1)
    start = body.index("<h2>Early warning</h2>")
    alone = tmp / "alone.html"
    alone.write_text(f"{head}</head><body>{body[start:]}", encoding="utf-8")
    shot = tmp / "alone.png"
    res = chromium(alone, tmp, f"--screenshot={shot}", "--window-size=1000,700")
    assert shot.exists(), res.stderr[-2000:]
    assert count_colour(shot, _rgb(LINE_COLOUR)) > 150  # the dashed slow line and the x
    assert count_colour(shot, _rgb(FIT_COLOUR)) > 300  # the fitted line and forecast
