"""`screener report RUN --html`: one self-contained HTML file with plots of one run.

Plotly was chosen because its wheel bundles plotly.js, which is inlined once into the page:
the file opens offline (no CDN, no network), and the plots stay interactive (hover shows
the node name, zoom into a 1,000-node scatter) where a static image would not. The page
has three parts: read vs write bandwidth per node (slow nodes in red, the peer read median
as a dashed line), iostat r_await per node over the probe, and the verdict table; given
the run's trends (report.trend_plot), a fourth: its declining nodes' early warning plots.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from screener.probe_data import NodeProbe, Status
from screener.report.trend_plot import RunTrends, trend_figure
from screener.store.query_rows import RunDetail, RunNodeRow
from screener.verdict.shadow import WOULD

SLOW_COLOUR = "#d62728"  # red: SLOW_READ / SLOW_WRITE (the test looks for this colour)
COLOURS = {
    Status.OK: "#1f77b4",
    Status.SLOW_READ: SLOW_COLOUR,
    Status.SLOW_WRITE: SLOW_COLOUR,
    Status.DEGRADED: "#ff7f0e",
    Status.UNKNOWN: "#7f7f7f",
}
MEDIAN_COLOUR = "#2ca02c"
WRITE_COLOUR = "#c7c7c7"
BAR_LIMIT = 64  # more nodes than this: a scatter instead of bars

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
td.l, th.l { text-align: left; }
tr.SLOW_READ td, tr.SLOW_WRITE td { background: #fde0e0; }
tr.UNKNOWN td { background: #eee; } tr.DEGRADED td { background: #fff1dc; }
.meta { color: #555; }
"""


def _slow(status: Status) -> bool:
    return status in (Status.SLOW_READ, Status.SLOW_WRITE)


def bandwidth_figure(detail: RunDetail) -> go.Figure:
    """Read and write bandwidth per node: grouped bars up to BAR_LIMIT nodes, else a read
    vs write scatter; slow nodes in red, the peer read median as a dashed line. Log scale:
    a slow node reads 8x to 1,000x below its peers and must stay visible. A read-only run
    (the prolog's triage) has no write to plot against: bars, reads only."""
    nodes = [n for n in detail.nodes if n.read_mb_s is not None]
    both = [n for n in nodes if n.write_mb_s is not None]
    fig = _bars(nodes) if len(nodes) <= BAR_LIMIT or not both else _scatter(both)
    median = detail.peer_read_median_mb_s
    if median is not None and median > 0:
        fig.add_hline(y=median, line={"color": MEDIAN_COLOUR, "dash": "dash", "width": 2})
        fig.add_annotation(  # on a log axis an annotation's y is log10 of the value
            x=1,
            xref="paper",
            xanchor="right",
            y=math.log10(median),
            yanchor="bottom",
            text=f"peer read median {median:,.0f} MB/s",
            showarrow=False,
            font={"color": MEDIAN_COLOUR},
        )
    fig.update_layout(height=480, template="plotly_white", legend={"orientation": "h", "y": 1.1})
    fig.update_yaxes(type="log", dtick=1, title="MB/s (log scale)", range=_decades(nodes))
    return fig


def _decades(nodes: Sequence[RunNodeRow]) -> list[float] | None:
    """The log axis' range in whole decades, from one below the smallest figure: bars start
    at a labelled tick, so 1,400 beside 2,500 MB/s look alike (autorange started the axis
    at the smallest bar, which then looked 10x shorter, with no tick to read)."""
    values = [v for n in nodes for v in (n.read_mb_s, n.write_mb_s) if v is not None and v > 0]
    if not values:
        return None
    return [math.floor(math.log10(min(values))) - 1, math.ceil(math.log10(max(values)) + 0.05)]


def _bars(nodes: Sequence[RunNodeRow]) -> go.Figure:
    fig = go.Figure()
    names = [n.node for n in nodes]
    fig.add_trace(
        go.Bar(
            x=names,
            y=[n.read_mb_s for n in nodes],
            name="read (red: slow)",
            marker={"color": [COLOURS[n.status] for n in nodes]},
            text=[f"{n.read_mb_s:,.0f}" if _slow(n.status) else "" for n in nodes],
            textposition="outside",
            hovertext=[f"{n.node} {n.status.value}: {n.reason}" for n in nodes],
            hoverinfo="text+y",
        )
    )
    fig.add_trace(
        go.Bar(x=names, y=[n.write_mb_s for n in nodes], name="write", marker_color=WRITE_COLOUR)
    )
    fig.update_layout(title="Sequential read and write bandwidth per node", barmode="group")
    return fig


def _scatter(nodes: Sequence[RunNodeRow]) -> go.Figure:
    fig = go.Figure()
    by_status: dict[Status, list[RunNodeRow]] = defaultdict(list)
    for n in nodes:
        by_status[n.status].append(n)
    for status, group in sorted(by_status.items(), key=lambda kv: (_slow(kv[0]), kv[0].value)):
        slow = _slow(status)
        fig.add_trace(
            go.Scatter(
                x=[n.write_mb_s for n in group],
                y=[n.read_mb_s for n in group],
                mode="markers+text" if slow else "markers",
                text=[n.node for n in group] if slow else None,
                textposition="middle right",
                hovertext=[f"{n.node}: {n.reason}" for n in group],
                hoverinfo="text",
                name=f"{status.value} ({len(group)})",
                marker={"color": COLOURS[status], "size": 12 if slow else 7},
            )
        )
    fig.update_layout(title="Sequential read vs write bandwidth per node")
    fig.update_xaxes(title="write (MB/s)")
    return fig


def _target_device(probe: NodeProbe) -> str | None:
    """The device the probe read from: the one with the most kB read over the samples."""
    read: dict[str, float] = defaultdict(float)
    for s in probe.iostat:
        read[s.device] += s.rkb_s
    return max(read, key=lambda d: read[d]) if read else None


def await_figure(probes: Sequence[NodeProbe], statuses: dict[str, Status]) -> go.Figure:
    """iostat r_await of each node's probe device, one line per node, slow nodes in red."""
    fig = go.Figure()
    for probe in probes:
        device = _target_device(probe)
        if device is None:
            continue
        waits = [s.r_await_ms for s in probe.iostat if s.device == device]
        status = statuses.get(probe.node, Status.UNKNOWN)
        slow = _slow(status)
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(waits) + 1)),
                y=waits,
                mode="lines+markers",
                name=f"{probe.node} ({device})",
                line={"color": COLOURS[status], "width": 3 if slow else 1},
                opacity=1.0 if slow else 0.6,
            )
        )
    fig.update_layout(
        title="iostat r_await during the probe (per node, probe device)",
        xaxis_title="iostat interval (one sample per interval)",
        yaxis_title="r_await (ms)",
        height=420,
        template="plotly_white",
    )
    fig.update_xaxes(dtick=1, rangemode="tozero")
    return fig


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def verdict_table(detail: RunDetail) -> str:
    """The verdicts as an HTML table (every text escaped), slow rows shaded."""
    heads = ["node", "status", "read MB/s", "write MB/s", "W/R", "read p99 ms", "z(read)"]
    heads += ["signals", "screener did", "reason"]
    left = {"node", "status", "signals", "screener did", "reason"}
    out = ["<table><tr>"]
    out += [f'<th class="{"l" if h in left else ""}">{html.escape(h)}</th>' for h in heads]
    out.append("</tr>")
    for n in detail.nodes:
        cells = [
            (n.node, True),
            (n.status.value, True),
            (_num(n.read_mb_s, ",.0f"), False),
            (_num(n.write_mb_s, ",.0f"), False),
            (_num(n.ratio, ".2f"), False),
            (_num(n.read_p99_ms, ".2f"), False),
            (_num(n.z_read, ".1f"), False),
            (", ".join(n.signals) or "-", True),
            (", ".join(n.actions) or "-", True),
            (n.reason, True),
        ]
        out.append(f'<tr class="{n.status.value}">')
        out += [f'<td class="{"l" if lft else ""}">{html.escape(c)}</td>' for c, lft in cells]
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _div(fig: go.Figure) -> str:
    div: str = pio.to_html(
        fig, include_plotlyjs=False, full_html=False, config={"displaylogo": False}
    )
    return div


def trend_section(trends: RunTrends) -> list[str]:
    """ "Early warning": what the plots are, then each DECLINING figure's plot (soonest
    crossing first), or one line saying no node of the run declines."""
    t = trends
    how = (
        f"Each sweep's figure over its round's peer median; Theil-Sen fit of the newest "
        f"{t.window} sweeps with its {t.confidence:.0%} band; DECLINING when even the slowest "
        f"fall the band allows crosses the slow line within {t.horizon_days:g} days. "
        "A warning: nothing is drained for it (<code>screener trend</code>)."
    )
    out = ["<h2>Early warning</h2>"]
    if not t.plots:
        line = f"No node of this run is declining ({t.fitted} of {t.nodes} nodes fitted)."
        return [*out, f"<p>{html.escape(line)}</p>"]
    nodes = len({p.verdict.node for p in t.plots} | {v.node for v in t.more})
    head = f"{nodes} of {t.nodes} nodes of this run declining ({t.fitted} fitted)."
    out += [f"<p>{html.escape(head)}</p>", f'<p class="meta">{how}</p>']
    for plot in t.plots:
        fig = trend_figure(plot, window=t.window, confidence=t.confidence, run_id=t.run_id)
        out.append(_div(fig))
    if t.more:
        named = ", ".join(f"{v.node} {v.figure}" for v in t.more)
        out.append(f"<p>Also declining, not plotted: {html.escape(named)}.</p>")
    return out


def render(
    detail: RunDetail,
    probes: Sequence[NodeProbe],
    now: datetime | None = None,
    trends: RunTrends | None = None,
) -> str:
    """The whole page as one string: CSS, plotly.js and the data inline, nothing fetched.
    With ``trends``, an "Early warning" section after the verdicts."""
    r = detail.run
    statuses = {n.node: n.status for n in detail.nodes}
    divs = [_div(bandwidth_figure(detail)), _div(await_figure(probes, statuses))]
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%SZ")
    meta = (
        f"{html.escape(r.trigger.value)} run, job {html.escape(r.job_id or '-')}, "
        f"nodes {html.escape(r.nodeset)}, started {r.started_at:%Y-%m-%d %H:%M:%SZ}, "
        f"status {html.escape(r.status)}: {r.n_ok} OK, {r.n_slow} SLOW, "
        f"{r.n_degraded} DEGRADED, {r.n_unknown} UNKNOWN"
    )
    notes = []
    if r.shared_cause:
        notes.append(f"<p><b>Shared cause:</b> {html.escape(r.shared_cause_reason)}</p>")
    if detail.guard_reason:
        why = html.escape(detail.guard_reason)
        notes.append(f"<p><b>Drain guard or shared cause:</b> {why}</p>")
    if detail.rollout:
        would = [n.node for n in detail.nodes if n.reason.startswith(WOULD)]
        shadowed = f" Would have drained: {html.escape(', '.join(would))}." if would else ""
        notes.append(f"<p><b>Rollout:</b> {html.escape(detail.rollout)}.{shadowed}</p>")
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>screener run {r.id}</title>",
            f"<style>{_CSS}</style>",
            f'<script type="text/javascript">{get_plotlyjs()}</script>',
            "</head><body>",
            f"<h1>screener run {r.id}</h1>",
            f'<p class="meta">{meta}. Report written {when}.</p>',
            *notes,
            "<h2>Bandwidth</h2>",
            divs[0],
            "<h2>Read wait on the probe device</h2>",
            divs[1],
            "<h2>Verdicts</h2>",
            verdict_table(detail),
            *(trend_section(trends) if trends is not None else []),
            "</body></html>",
        ]
    )
