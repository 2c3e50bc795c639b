"""The HTML report's "Early warning" plots (issue 46): a declining node's figure over its
round's peer median, sweep by sweep, with the Theil-Sen line extended to the forecast
crossing of the slow line (dashed), as `screener trend` decided it.

``run_trends`` reads the store (the run's nodes, as of the run's start, so an old run's
page says what its trend was then); the rest is pure: ``choose`` picks what to plot from
verdicts and points, ``trend_figure`` draws one, refitting with the same window and
confidence as the decision (verdict.trend.fit), so the line is the one the rule read.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import plotly.graph_objects as go

from screener.verdict.trend import (
    DAY_S,
    Point,
    Scale,
    TrendStatus,
    TrendVerdict,
    counter_series,
    current_series,
    fit,
)

MAX_PLOTS = 6  # DECLINING figures plotted, soonest crossing first; the rest are named
POINT_COLOUR = "#1f77b4"  # the fitted sweeps
EARLIER_COLOUR = "#aaaaaa"  # sweeps outside the window (older, or another recipe)
FIT_COLOUR = "#ff7f0e"
BAND_FILL = "rgba(255, 127, 14, 0.15)"
LINE_COLOUR = "#d62728"  # the slow line: the rules' threshold
HEIGHT = 440

if TYPE_CHECKING:
    from screener.policy import Policy
    from screener.store.store import Store


@dataclass(frozen=True)
class TrendPlot:
    """One node's figure to plot: the decision and every point it was decided on."""

    verdict: TrendVerdict
    points: tuple[Point, ...]


@dataclass(frozen=True)
class RunTrends:
    """What the report's section shows: the DECLINING figures to plot (at most MAX_PLOTS),
    the ones left out, and how many of the run's nodes had a forecast at all."""

    plots: tuple[TrendPlot, ...]
    more: tuple[TrendVerdict, ...]  # DECLINING beyond MAX_PLOTS, named only
    nodes: int  # the run's nodes
    fitted: int  # of them, with enough sweeps to fit a probe figure (not TOO_FEW)
    window: int
    confidence: float
    horizon_days: float
    run_id: int | None = None  # its sweep is marked on the plots


def choose(
    decided: Sequence[tuple[TrendVerdict, Sequence[Point]]],
    nodes: int,
    *,
    window: int,
    confidence: float,
    horizon_days: float,
    run_id: int | None = None,
    limit: int = MAX_PLOTS,
) -> RunTrends:
    """The DECLINING figures, soonest crossing first, the first ``limit`` to plot."""
    warned = sorted(
        (
            (v, tuple(p))
            for v, p in decided
            if v.status is TrendStatus.DECLINING  # a warning only: nothing else is plotted
        ),
        key=lambda vp: (vp[0].days_to_cross or 0.0, vp[0].node, vp[0].figure),
    )
    fitted = len(  # a fit of a probe figure: a SMART counter's check needs 2 sweeps only
        {
            v.node
            for v, _ in decided
            if v.status is not TrendStatus.TOO_FEW and v.scale is not Scale.COUNTER
        }
    )
    return RunTrends(
        tuple(TrendPlot(v, p) for v, p in warned[:limit]),
        tuple(v for v, _ in warned[limit:]),
        nodes,
        fitted,
        window,
        confidence,
        horizon_days,
        run_id,
    )


def run_trends(
    store: Store, policy: Policy, nodes: Sequence[str], as_of: datetime, run_id: int | None = None
) -> RunTrends:
    """The trend of each of ``nodes`` as it stood at ``as_of`` (sweeps up to then, within
    [trend] since_days), decided as `screener trend` decides (store.trend.decider)."""
    from screener.store.trend import decider, node_series

    tp = policy.trend
    decide = decider(policy, timedelta(days=tp.horizon_days))
    decided = []
    for s in node_series(store, nodes, as_of - timedelta(days=tp.since_days)):
        for figure, points in s.points.items():
            mine = [p for p in points if p.at <= as_of]
            if mine:
                decided.append((decide(s.node, figure, mine), mine))
    return choose(
        decided,
        len(nodes),
        window=max(tp.window, tp.min_sweeps),
        confidence=tp.confidence,
        horizon_days=tp.horizon_days,
        run_id=run_id,
    )


@dataclass(frozen=True)
class Line:
    """The fitted line in the figure's own terms: ``level`` at ``last_at``, moving by
    ``slope`` per day (log slope for a ratio), its band ``low``..``high`` (None: none)."""

    start: datetime
    last_at: datetime
    level: float
    slope: float
    log: bool
    low: float | None = None
    high: float | None = None

    def at(self, when: datetime, slope: float | None = None) -> float:
        d = (when - self.last_at).total_seconds() / DAY_S
        s = self.slope if slope is None else slope
        return self.level * math.exp(s * d) if self.log else self.level + s * d


def fitted_line(
    v: TrendVerdict, points: Sequence[Point], window: int, confidence: float
) -> tuple[list[Point], Line | None]:
    """The points the decision read (its window) and the line through them: Theil-Sen with
    Sen's band for a ratio or share, a counter's rise over its series; None: too few."""
    if v.scale is Scale.COUNTER:
        series = counter_series(points)
        if v.figure == "media errors":  # any_rise reads only the window
            series = series[-window:]
        if len(series) < 2 or series[-1].at <= series[0].at:
            return series, None
        days = (series[-1].at - series[0].at).total_seconds() / DAY_S
        rise = (series[-1].ratio - series[0].ratio) / days
        return series, Line(series[0].at, series[-1].at, series[-1].ratio, rise, log=False)
    log = v.scale is not Scale.SHARE
    series = current_series(points, positive=log)[-window:]
    f = fit(series, confidence, log=log) if len(series) >= 3 else None
    if f is None:
        return series, None
    return series, Line(series[0].at, f.last_at, f.level, f.slope, log, f.low, f.high)


def _words(v: TrendVerdict) -> tuple[str, str]:
    """The title an admin reads and the y axis' label."""
    if v.scale is Scale.SHARE:
        return f"{v.node} {v.figure} over peers", "points over peers' share"
    if v.scale is Scale.COUNTER:
        return f"{v.node} {v.figure}", v.figure + (" (%)" if v.figure == "percentage used" else "")
    return f"{v.node} {v.figure} x peers", "ratio to round's peer median (log)"


def _line_text(v: TrendVerdict) -> str:
    if v.scale is Scale.SHARE:
        return f"slow line {v.threshold:+g} points"
    if v.scale is Scale.COUNTER:
        return f"line {v.threshold:g}"
    return f"slow line {v.threshold:g}x"


def trend_figure(
    plot: TrendPlot, *, window: int, confidence: float, run_id: int | None = None
) -> go.Figure:
    """One node's figure: its sweeps (the window the fit read in blue, earlier ones grey,
    ``run_id``'s ringed), the fitted line over the window and on to the forecast crossing
    (dotted), the band of the slope from the newest fitted level (the rule's slowest
    worsening is its edge), and the slow line dashed."""
    v = plot.verdict
    series, line = fitted_line(v, plot.points, window, confidence)
    title, y_title = _words(v)
    used = {(p.at, p.run_id) for p in series}
    earlier = [p for p in sorted(plot.points, key=lambda p: p.at) if (p.at, p.run_id) not in used]
    fig = go.Figure()
    if earlier:
        fig.add_trace(_markers(earlier, "earlier sweeps (not fitted)", EARLIER_COLOUR, 7))
    fig.add_trace(_markers(series, f"sweeps fitted ({len(series)})", POINT_COLOUR, 9))
    mine = [p for p in plot.points if run_id is not None and p.run_id == run_id]
    if mine:
        ring = _markers(mine, f"this run ({run_id})", POINT_COLOUR, 16)
        ring.update(marker={"symbol": "circle-open", "line": {"width": 2}}, mode="markers")
        fig.add_trace(ring)
    ends: list[datetime] = [p.at for p in plot.points]
    if line is not None:
        name = "Theil-Sen fit" if v.scale is not Scale.COUNTER else "rise over the series"
        xs = [line.start, line.last_at]
        fig.add_trace(_path(xs, [line.at(x) for x in xs], name, "solid"))
        ahead = v.crosses_at if v.status is TrendStatus.DECLINING else None
        if ahead is not None and ahead > line.last_at:
            ends.append(ahead)
            if line.low is not None and line.high is not None:
                xb = [line.last_at, ahead, ahead, line.last_at]
                yb = [line.level, line.at(ahead, line.high), line.at(ahead, line.low), line.level]
                fig.add_trace(
                    go.Scatter(
                        x=xb,
                        y=yb,
                        fill="toself",
                        fillcolor=BAND_FILL,
                        line={"width": 0},
                        mode="lines",
                        hoverinfo="skip",
                        name=f"slope band ({confidence:.0%}), from the newest fit",
                    )
                )
            fwd = [line.last_at, ahead]
            fig.add_trace(_path(fwd, [line.at(x) for x in fwd], "forecast", "dot"))
            fig.add_trace(
                go.Scatter(
                    x=[ahead],
                    y=[v.threshold],
                    mode="markers+text",
                    marker={"color": LINE_COLOUR, "size": 10, "symbol": "x"},
                    text=[f"crosses ~{ahead:%Y-%m-%d}"],
                    textposition="bottom left" if v.scale is Scale.FALLING else "top left",
                    textfont={"color": LINE_COLOUR},
                    name="forecast crossing",
                    showlegend=False,
                )
            )
    span = [min(ends), max(ends)]
    fig.add_trace(
        go.Scatter(
            x=span,
            y=[v.threshold, v.threshold],
            mode="lines",
            line={"color": LINE_COLOUR, "dash": "dash", "width": 2},
            name=_line_text(v),
        )
    )
    fig.update_layout(
        title={"text": html.escape(title), "subtitle": {"text": html.escape(_subtitle(v))}},
        height=HEIGHT,
        template="plotly_white",
        margin={"t": 80, "b": 100},
        legend={"orientation": "h", "yanchor": "top", "y": -0.28, "x": 0},
        yaxis_title=y_title,
        xaxis_title="sweep (UTC)",
    )
    if v.scale in (Scale.FALLING, Scale.RISING):
        fig.update_yaxes(type="log", range=_log_range(fig, v.threshold))
    return fig


def _subtitle(v: TrendVerdict) -> str:
    """The decision's words without the node (the title names it)."""
    return v.reason.removeprefix(f"{v.node}: ")


def _markers(points: Sequence[Point], name: str, colour: str, size: int) -> go.Scatter:
    return go.Scatter(
        x=[p.at for p in points],
        y=[p.ratio for p in points],
        mode="markers",
        name=name,
        marker={"color": colour, "size": size},
        hovertext=[f"run {p.run_id}, recipe {p.recipe}" for p in points],
        hoverinfo="text+x+y",
    )


def _path(xs: Sequence[datetime], ys: Sequence[float], name: str, dash: str) -> go.Scatter:
    return go.Scatter(
        x=list(xs), y=list(ys), mode="lines", name=name, line={"color": FIT_COLOUR, "dash": dash}
    )


def _log_range(fig: go.Figure, threshold: float) -> list[float]:
    """log10 bounds holding every point, line and the slow line, with a little room: the
    band may fan far past the line, and autorange would then squash the sweeps."""
    ys = [threshold]
    for trace in fig.data:
        if trace.name and trace.name.startswith("slope band"):
            continue
        ys += [y for y in trace.y if y is not None and y > 0]
    lo, hi = math.log10(min(ys)), math.log10(max(ys))
    pad = max(0.05, (hi - lo) * 0.08)
    return [lo - pad, hi + pad]
