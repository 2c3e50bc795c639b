"""A prometheus_client custom collector that reads the store at scrape time.

Two things are kept between scrapes: the probe-duration histogram, added up incrementally
(probes with a higher id than the last scrape saw), so a scrape never rescans the whole
probe table; and the per-node figures while no node, verdict or drain/resume was added
(StoreCollector below), so an unchanged fleet is not re-read and re-rendered every scrape.
Probe ages are computed at every scrape. The early warning's forecasts (issue 46) are the
marks each sweep stored for the nodes it probed (store/trend_marks.py), read at every
scrape (one query of the DECLINING rows): a scrape never fits a trend. Names follow
Prometheus conventions: ``screener_`` prefix, base units (bytes per second, seconds),
``_total`` counters. A store failure does not fail the scrape: ``screener_store_up`` goes
to 0 and the store's metrics are left out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from screener.errors import ScreenerError
from screener.metrics.exposition import ColumnGauge, label_value
from screener.policy import Policy
from screener.probe_data import Trigger
from screener.store import Store, views
from screener.store.tables import EVENT_ACTIONS, RUN_STATUSES
from screener.store.trend_marks import read_marks
from screener.verdict.trend import TrendVerdict

log = logging.getLogger(__name__)

# A probe is fio write + read + random read plus iostat: seconds to a few minutes.
PROBE_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
MB = 1e6  # the store keeps MB/s (decimal, as fio prints them); metrics are bytes/s
# node_events action -> counter name (without _total)
EVENT_COUNTERS = {
    "drain": ("screener_drains", "Nodes screener drained in Slurm."),
    "resume": ("screener_resumes", "Nodes screener resumed after they passed again."),
    "drain_failed": ("screener_drain_failures", "Drains Slurm refused or that timed out."),
    "resume_refused": (
        "screener_resumes_refused",
        "Resumes skipped because the node's drain reason was not screener's.",
    ),
    "guard_trip": (
        "screener_guard_trips",
        "Drains the mass-drain guard stopped (shared cause suspected).",
    ),
}
assert set(EVENT_COUNTERS) == set(EVENT_ACTIONS)  # a new action needs a counter


class _Histogram:
    """Running probe-duration histogram: cumulative bucket counts over probes seen so far."""

    def __init__(self) -> None:
        self.last_id = 0
        self.buckets = [0] * len(PROBE_BUCKETS)
        self.count = 0
        self.sum = 0.0
        self.lock = threading.Lock()  # the HTTP server may scrape from two threads

    def update(self, store: Store) -> None:
        with self.lock:
            last, buckets, count, total = views.probe_duration_buckets(
                store, self.last_id, PROBE_BUCKETS
            )
            self.last_id = last
            self.buckets = [a + b for a, b in zip(self.buckets, buckets, strict=True)]
            self.count += count
            self.sum += total


@dataclass(frozen=True)
class _NodeFamilies:
    """The per-node families of one read of the store, and what the age is computed from."""

    marks: tuple[int, int, int]  # views.change_marks when they were read
    read_at: float  # time.monotonic()
    names: Sequence[str]
    texts: Sequence[str]  # rendered node label of each name
    last_probe_at: Sequence[datetime | None]
    families: list[Metric]  # every per-node family but the age


class StoreCollector(Collector):
    """Yields screener's metrics from ``store`` on every ``collect()`` (register it yourself:
    ``registry.register(StoreCollector(store))``). ``clock`` gives "now" for probe ages.

    The per-node figures are read again when a node, verdict or drain/resume event has been
    added since the last read (``views.change_marks``: one query of three primary-key
    lookups per scrape) or the last read is ``reuse_s`` seconds old (0: every scrape); the
    probe age is computed from the stored start time at every scrape, so it is never stale.
    """

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime] | None = None,
        reuse_s: float = 60.0,
        policy: Policy | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or (lambda: datetime.now(UTC))
        self.reuse_s = reuse_s
        self.histogram = _Histogram()
        self._nodes: _NodeFamilies | None = None
        self.policy = policy or Policy()  # [trend] since_days: how old a stored mark may be

    def describe(self) -> Iterable[Metric]:
        return []  # no pre-registration checks: collect() talks to the database

    def collect(self) -> Iterator[Metric]:
        try:
            metrics = list(self._store_metrics())
            up = 1.0
        except ScreenerError as exc:
            log.warning("scrape: %s", exc)
            metrics, up = [], 0.0
        yield from metrics
        yield GaugeMetricFamily(
            "screener_store_up", "1 if the last scrape could read the results store.", value=up
        )

    def _store_metrics(self) -> Iterator[Metric]:
        yield from self._node_families()
        yield from self._trend_families()
        runs, events = views.counters(self.store)
        c = CounterMetricFamily(
            "screener_runs", "Screening runs by trigger and status.", labels=["trigger", "status"]
        )
        for trigger in Trigger:
            for status in RUN_STATUSES:
                c.add_metric([trigger.value, status], runs.get((trigger.value, status), 0))
        yield c
        for action, (name, doc) in EVENT_COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=events.get(action, 0))
        self.histogram.update(self.store)
        h = self.histogram
        yield HistogramMetricFamily(
            "screener_probe_duration_seconds",
            "Wall time of one node's probe round (fio jobs, iostat, facts).",
            buckets=[(str(b), n) for b, n in zip(PROBE_BUCKETS, h.buckets, strict=True)]
            + [("+Inf", h.count)],
            sum_value=h.sum,
        )

    def _node_families(self) -> list[Metric]:
        """The per-node families: reused or read again (see the class), age always now."""
        now = self.clock()
        marks = views.change_marks(self.store)
        nodes = self._nodes
        if (
            nodes is None
            or nodes.marks != marks
            or time.monotonic() - nodes.read_at >= self.reuse_s
        ):
            read_at = time.monotonic()
            columns = views.node_columns(self.store)
            texts = [f'node="{label_value(n)}"' for n in columns.node]
            nodes = _NodeFamilies(
                marks,
                read_at,
                columns.node,
                texts,
                columns.last_probe_at,
                _node_metrics(columns, texts),
            )
            self._nodes = nodes  # one assignment: a concurrent scrape sees old or new
        ages = [None if t is None else (now - t).total_seconds() for t in nodes.last_probe_at]
        return [*nodes.families, _gauge(*NODE_AGE, nodes.names, nodes.texts, ages)]

    def _trend_families(self) -> list[Metric]:
        """The DECLINING nodes' forecasts as the sweep that last probed each stored them
        (none fitted before [trend] since_days: that node has no series left)."""
        since = self.clock() - timedelta(days=self.policy.trend.since_days)
        return trend_metrics(read_marks(self.store, declining_only=True, since=since))


TREND_GAUGES = (
    (
        "screener_node_trend_days_to_slow_line",
        "Days until the node's figure is forecast to cross its line (early warning, "
        "`screener trend`; figure: seq read, rand read, read p99, stall share, percentage "
        "used, media errors; 0 while media errors rise); a series only while the node is "
        "DECLINING. Never drains.",
    ),
    (
        "screener_node_trend_sweeps_to_slow_line",
        "Sweeps until the node's figure is forecast to cross its line; a series only "
        "while the node is DECLINING.",
    ),
)


def trend_metrics(declining: Sequence[TrendVerdict]) -> list[Metric]:
    """Per DECLINING node and figure ("seq read", "rand read", "read p99", "stall share",
    "percentage used", "media errors"): its forecast in days and in sweeps to the line
    (0 for media errors that rose: the line is any new one)."""
    rows = [v for v in declining if v.days_to_cross is not None]
    labels: dict[str, Sequence[str]] = {
        "figure": [v.figure for v in rows],
        "node": [v.node for v in rows],
    }
    texts = [f'figure="{label_value(v.figure)}",node="{label_value(v.node)}"' for v in rows]
    columns = (
        [float(v.days_to_cross or 0.0) for v in rows],
        [float(v.sweeps_to_cross or 0.0) for v in rows],
    )
    return [
        ColumnGauge(name, doc, labels, texts, column)
        for (name, doc), column in zip(TREND_GAUGES, columns, strict=True)
    ]


# Per-node gauges: (name, help) in the order they are exported.
NODE_GAUGES = {
    "read": (
        "screener_node_read_bytes_per_second",
        "Sequential read bandwidth in the node's latest verdict.",
    ),
    "write": (
        "screener_node_write_bytes_per_second",
        "Sequential write bandwidth in the node's latest verdict.",
    ),
    "ratio": (
        "screener_node_write_read_ratio",
        "Write over read bandwidth in the node's latest verdict (healthy is about 1).",
    ),
    "p99": (
        "screener_node_read_latency_p99_seconds",
        "99th percentile read completion latency in the node's latest verdict.",
    ),
}
NODE_AGE = (
    "screener_node_last_probe_age_seconds",
    "Seconds since the run of the node's latest verdict started.",
)


def _node_metrics(nodes: views.NodeColumns, texts: Sequence[str]) -> list[Metric]:
    """Per-node gauges from the latest verdict of each node, all but the age (``texts``:
    each node's rendered label). 10,000 nodes make 70,000 series: each family is a few
    column comprehensions, rendered in one pass (ColumnGauge, see exposition.py)."""
    names = nodes.node
    read, write, ratio, p99 = (
        _gauge(name, doc, names, texts, column)
        for (name, doc), column in zip(
            NODE_GAUGES.values(),
            (
                [None if v is None else v * MB for v in nodes.read_mb_s],  # bytes per second
                [None if v is None else v * MB for v in nodes.write_mb_s],
                nodes.ratio,
                [None if v is None else v / 1000.0 for v in nodes.read_p99_ms],  # seconds
            ),
            strict=True,
        )
    )
    judged = [i for i, s in enumerate(nodes.status) if s is not None]
    statuses = [nodes.status[i] or "" for i in judged]
    verdict = ColumnGauge(
        "screener_node_verdict",
        "The node's latest verdict: 1 on the series whose verdict label is that status.",
        {"node": [names[i] for i in judged], "verdict": statuses},
        [f'{texts[i]},verdict="{label_value(s)}"' for i, s in zip(judged, statuses, strict=True)],
        [1.0] * len(judged),
    )
    drained = ColumnGauge(
        "screener_node_drained_by_screener",
        "1 if screener drained the node and has not resumed it.",
        {"node": names},
        texts,
        [1.0 if d else 0.0 for d in nodes.drained_by_screener],
    )
    since = _gauge(
        "screener_node_drained_since_timestamp_seconds",
        "When screener drained the node (Unix time); no series while it is not drained.",
        names,
        texts,
        [None if t is None else t.timestamp() for t in nodes.drained_at]
        if nodes.drained_at
        else [None] * len(names),
    )
    return [read, write, ratio, p99, verdict, drained, since]


def _gauge(
    name: str, doc: str, names: Sequence[str], texts: Sequence[str], column: Sequence[float | None]
) -> ColumnGauge:
    """One per-node gauge; nodes whose figure is missing (None) have no series."""
    if None in column:
        keep = [i for i, v in enumerate(column) if v is not None]
        names, texts = [names[i] for i in keep], [texts[i] for i in keep]
        values = [float(column[i] or 0.0) for i in keep]
    else:
        values = column  # type: ignore[assignment]  # no None in it
    return ColumnGauge(name, doc, {"node": names}, texts, values)
