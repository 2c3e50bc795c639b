"""A prometheus_client custom collector that reads the store at scrape time.

Nothing is cached between scrapes except the probe-duration histogram, which is added up
incrementally (probes with a higher id than the last scrape saw), so a scrape never rescans
the whole probe table. Names follow Prometheus conventions: ``screener_`` prefix, base
units (bytes per second, seconds), ``_total`` counters. A store failure does not fail the
scrape: ``screener_store_up`` goes to 0 and the store's metrics are left out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from screener.errors import ScreenerError
from screener.model import Status, Trigger
from screener.store import Store, views
from screener.store.rows import NodeRow
from screener.store.schema import EVENT_ACTIONS, RUN_STATUSES

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


class StoreCollector(Collector):
    """Yields screener's metrics from ``store`` on every ``collect()`` (register it yourself:
    ``registry.register(StoreCollector(store))``). ``clock`` gives "now" for probe ages."""

    def __init__(self, store: Store, clock: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self.clock = clock or (lambda: datetime.now(UTC))
        self.histogram = _Histogram()

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
        nodes = views.node_overview(self.store, self.clock())
        yield from _node_metrics(nodes)
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


def _node_metrics(nodes: list[NodeRow]) -> Iterator[Metric]:
    """Per-node gauges from the latest verdict of each node."""
    read = GaugeMetricFamily(
        "screener_node_read_bytes_per_second",
        "Sequential read bandwidth in the node's latest verdict.",
        labels=["node"],
    )
    write = GaugeMetricFamily(
        "screener_node_write_bytes_per_second",
        "Sequential write bandwidth in the node's latest verdict.",
        labels=["node"],
    )
    ratio = GaugeMetricFamily(
        "screener_node_write_read_ratio",
        "Write over read bandwidth in the node's latest verdict (healthy is about 1).",
        labels=["node"],
    )
    p99 = GaugeMetricFamily(
        "screener_node_read_latency_p99_seconds",
        "99th percentile read completion latency in the node's latest verdict.",
        labels=["node"],
    )
    verdict = GaugeMetricFamily(
        "screener_node_verdict",
        "The node's latest verdict: 1 on the series whose verdict label is that status.",
        labels=["node", "verdict"],
    )
    drained = GaugeMetricFamily(
        "screener_node_drained_by_screener",
        "1 if screener drained the node and has not resumed it.",
        labels=["node"],
    )
    age = GaugeMetricFamily(
        "screener_node_last_probe_age_seconds",
        "Seconds since the run of the node's latest verdict started.",
        labels=["node"],
    )
    for n in nodes:
        label = [n.node]
        if n.read_mb_s is not None:
            read.add_metric(label, n.read_mb_s * MB)
        if n.write_mb_s is not None:
            write.add_metric(label, n.write_mb_s * MB)
        if n.ratio is not None:
            ratio.add_metric(label, n.ratio)
        if n.read_p99_ms is not None:
            p99.add_metric(label, n.read_p99_ms / 1000.0)
        if n.status is not None:
            verdict.add_metric([n.node, Status(n.status).value], 1.0)
        if n.age_s is not None:
            age.add_metric(label, n.age_s)
        drained.add_metric(label, 1.0 if n.drained_by_screener else 0.0)
    yield from (read, write, ratio, p99, verdict, drained, age)
