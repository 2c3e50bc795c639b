"""What the alerting rules (deploy/prometheus/screener-rules.yml) need beyond the store's
figures: when each kind of run last finished, the slowest recent prolog against its
budget, and what waits in the spool (runs, with any drains made while the database was
down, and epilog ingests). A custom collector read at scrape time
(register it yourself: ``registry.register(OpsCollector(store, policy))``).

A store failure leaves the store-backed families out (``screener_store_up`` of the store
collector says why); an unreadable spool directory leaves ``screener_spool_runs`` out. A
scrape never fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from screener.errors import ScreenerError
from screener.policy import Policy
from screener.probe_data import Trigger
from screener.spool import ingest_files, spool_files
from screener.store import Store
from screener.store.run_views import last_finished, run_walls

log = logging.getLogger(__name__)

PROLOG_WINDOW_S = 3600.0  # screener_prolog_wall_max_seconds: prolog runs of the last hour


class OpsCollector(Collector):
    """Yields the families above from ``store`` and ``policy`` on every ``collect()``."""

    def __init__(
        self, store: Store, policy: Policy, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock or (lambda: datetime.now(UTC))

    def describe(self) -> Iterable[Metric]:
        return []  # no pre-registration checks: collect() talks to the database

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "screener_prolog_budget_seconds",
            "The prolog's budget ([prolog] budget_s): it decides with what is done by then.",
            value=self.policy.prolog.budget_s,
        )
        try:
            finished = last_finished(self.store)
            since = self.clock() - timedelta(seconds=PROLOG_WINDOW_S)
            walls = run_walls(self.store, Trigger.PROLOG, since)
        except ScreenerError as exc:
            log.warning("ops scrape: %s", exc)
        else:
            yield from run_metrics(finished, walls)
        try:
            spool_dir = self.policy.store.spool_dir
            spooled = len(spool_files(spool_dir)) + len(ingest_files(spool_dir))
        except OSError as exc:
            log.warning("ops scrape: spool %s: %s", self.policy.store.spool_dir, exc.strerror)
        else:
            yield GaugeMetricFamily(
                "screener_spool_runs",
                "Files spooled while the database was unreachable, not replayed yet: runs"
                " (with the drains made meanwhile) and epilog ingests.",
                value=spooled,
            )


def run_metrics(
    finished: dict[tuple[str, str], datetime], walls: Iterable[float]
) -> Iterator[Metric]:
    """The run families (pure): last finish per (trigger, status), slowest recent prolog."""
    last = GaugeMetricFamily(
        "screener_last_run_timestamp_seconds",
        "When the newest finished run of this trigger and status ended (Unix time).",
        labels=["trigger", "status"],
    )
    for (trigger, status), at in sorted(finished.items()):
        last.add_metric([trigger, status], at.timestamp())
    yield last
    walls = list(walls)
    if walls:  # absent when no prolog ran within the window: nothing to compare
        yield GaugeMetricFamily(
            "screener_prolog_wall_max_seconds",
            "Longest wall time of a prolog run started within the last hour.",
            value=max(walls),
        )
