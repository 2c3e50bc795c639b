"""A real Prometheus (Debian package) scraping a real `screener exporter` HTTP server, both
on loopback ports, over a seeded PostgreSQL store. Loaded with pytest_plugins."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from accuracy_seed import seed_accuracy
from admin_seed import Seeded, seed_fleet
from prometheus_client import CollectorRegistry

from screener.metrics import StoreCollector, serve
from screener.metrics.accuracy import AccuracyCollector
from screener.metrics.ops import OpsCollector
from screener.policy import Policy, StorePolicy
from screener.store import Store, open_store

PROMETHEUS = "/usr/bin/prometheus"
RULES = Path(__file__).parent.parent / "deploy" / "prometheus" / "screener-rules.yml"
SHADOW = ("peer_tail",)  # a shadowed rule: the per-rule accuracy panel has a series
SPOOLED = 1  # runs left in the fixture's spool directory (ScreenerSpoolUnreplayed)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prom:
    """The running pair: query Prometheus' HTTP API, see what was seeded."""

    url: str
    exporter_url: str
    seeded: Seeded
    db_url: str
    store: Store
    spooled: int = SPOOLED

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def wait_for(self, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll until ``expr`` returns samples (each poll is a real query, not a sleep
        standing in for one); the last empty answer is returned on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result or time.monotonic() > deadline:
                return result
            time.sleep(0.5)


@pytest.fixture(scope="module")
def prom(pg_dbs: Any, pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is not installed: `make apt` (Debian package prometheus)")
    db_url = pg_dbs.create(template=pg_template)
    store = open_store(db_url)
    seeded = seed_fleet(store, datetime.now(UTC).replace(microsecond=0))
    seed_accuracy(store, seeded.now)  # one screened job with a miss: the accuracy panel
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    registry.register(AccuracyCollector(store, shadow=SHADOW))
    tmp = tmp_path_factory.mktemp("prometheus")
    spool = tmp / "spool"
    spool.mkdir()
    for i in range(SPOOLED):
        (spool / f"run-{i}.jsonl").write_text("")  # spool_files counts names only
    registry.register(OpsCollector(store, Policy(store=StorePolicy(spool_dir=str(spool)))))
    exporter = f"127.0.0.1:{free_port()}"
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(registry, exporter, stop), daemon=True)
    server.start()
    config = tmp / "prometheus.yml"
    config.write_text(  # the alerting rules are loaded as an admin includes them
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        f"  - job_name: screener\n    static_configs: [{{targets: ['{exporter}']}}]\n"
    )
    port = free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        p = Prom(f"http://127.0.0.1:{port}", f"http://{exporter}", seeded, db_url, store)
        deadline = time.monotonic() + 60
        while True:  # ready = the API answers and the exporter has been scraped
            try:
                if p.query('up{job="screener"} == 1'):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"prometheus not ready: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield p
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        stop.set()
        server.join(timeout=10)
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)
