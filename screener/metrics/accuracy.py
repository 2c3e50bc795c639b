"""Screening accuracy as Prometheus gauges: a custom collector that reads the store at
scrape time (register it yourself: ``registry.register(AccuracyCollector(store))``).

The same comparison as `screener accuracy` (screener/ingest/accuracy.py) over a sliding
window (default 30 days) of ingested jobs, per partition. Every class is exported, zeros
included, so a dashboard query has a series to show before the first miss. What the
figures cannot tell (a drained node's in-job speed) is in docs/ingest.md: ``caught`` is a
count, never scored. A store failure leaves these metrics out of the scrape (the store
collector's ``screener_store_up`` says why); it never fails the scrape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from screener.errors import ScreenerError
from screener.ingest.accuracy import AccuracyRow, compare_all, summarize
from screener.ingest.rule_accuracy import RuleRow, by_rule
from screener.store import Store
from screener.store.jobs import in_job_reads, prolog_verdicts

log = logging.getLogger(__name__)

WINDOW_S = 30 * 86400.0
NO_PARTITION = "-"  # jobs ingested without --partition (as `screener accuracy` shows them)
# label value of screener_accuracy_nodes -> AccuracyRow field
NODE_CLASSES = {
    "miss": "misses",
    "stayed_ok": "stayed_ok",
    "caught": "caught",
    "confirmed": "confirmed",
    "false_alarm": "false_alarms",
    "unscreened": "unscreened",
    "not_judged": "not_judged",
}


class AccuracyCollector(Collector):
    """Yields ``screener_accuracy_*`` from ``store`` on every ``collect()``."""

    def __init__(
        self,
        store: Store,
        window_s: float = WINDOW_S,
        clock: Callable[[], datetime] | None = None,
        shadow: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.window_s = window_s
        self.clock = clock or (lambda: datetime.now(UTC))
        self.shadow = tuple(shadow)  # [verdict] shadow: the rules' mode label

    def describe(self) -> Iterable[Metric]:
        return []  # no pre-registration checks: collect() talks to the database

    def collect(self) -> Iterator[Metric]:
        try:
            rows, rules = self.rows()
        except ScreenerError as exc:
            log.warning("accuracy scrape: %s", exc)
            return
        yield from accuracy_metrics(rows, self.window_s)
        yield rule_metric(rules)

    def rows(self) -> tuple[list[AccuracyRow], list[RuleRow]]:
        """One summary row per partition over the window (no "all" row: sum in PromQL),
        and one row per rule that fired or is shadowed."""
        since = self.clock() - timedelta(seconds=self.window_s)
        in_job = in_job_reads(self.store, since)
        prolog = prolog_verdicts(self.store, sorted({r.job_id for r in in_job}))
        jobs = compare_all(in_job, prolog)
        parts = sorted({c.partition or NO_PARTITION for c in jobs})
        rows = [
            summarize([c for c in jobs if (c.partition or NO_PARTITION) == p], "partition")[0]
            for p in parts
        ]
        return rows, by_rule(in_job, prolog, self.shadow)


RULE_CLASSES = ("fired", "caught", "false_alarms", "misses", "drained")


def rule_metric(rules: Iterable[RuleRow]) -> Metric:
    """``screener_accuracy_rule_nodes{rule, mode, class}`` (pure): each rule's record."""
    family = GaugeMetricFamily(
        "screener_accuracy_rule_nodes",
        "Per verdict rule (mode live or shadow), nodes of ingested jobs: fired, caught (fired,"
        " in-job outlier), false_alarms (fired, fine in the job), misses (not fired, outlier),"
        " drained (fired, never ran the job: unknowable).",
        labels=["rule", "mode", "class"],
    )
    for row in rules:
        for name in RULE_CLASSES:
            family.add_metric([row.rule, row.mode, name], getattr(row, name))
    return family


def accuracy_metrics(rows: Iterable[AccuracyRow], window_s: float) -> Iterator[Metric]:
    """The gauges for ``rows`` (pure: one row per partition)."""
    window = GaugeMetricFamily(
        "screener_accuracy_window_seconds",
        "Window of ingested jobs the screener_accuracy_* gauges cover.",
        value=window_s,
    )
    jobs = GaugeMetricFamily(
        "screener_accuracy_jobs",
        "Jobs ingested within the window, per partition.",
        labels=["partition"],
    )
    screened = GaugeMetricFamily(
        "screener_accuracy_screened_jobs",
        "Ingested jobs within the window that the prolog screened, per partition.",
        labels=["partition"],
    )
    nodes = GaugeMetricFamily(
        "screener_accuracy_nodes",
        "Nodes of ingested jobs by outcome: miss = screened OK then an in-job outlier; "
        "caught = drained before the job (in-job speed unknowable, never scored).",
        labels=["partition", "class"],
    )
    rate = GaugeMetricFamily(
        "screener_accuracy_miss_ratio",
        "Misses over nodes screened OK and judged in the job (absent when there are none).",
        labels=["partition"],
    )
    for row in rows:
        jobs.add_metric([row.group], row.jobs)
        screened.add_metric([row.group], row.screened_jobs)
        for label, attr in NODE_CLASSES.items():
            nodes.add_metric([row.group, label], getattr(row, attr))
        if row.miss_rate is not None:
            rate.add_metric([row.group], row.miss_rate)
    yield from (window, jobs, screened, nodes, rate)
