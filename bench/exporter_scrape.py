"""One Prometheus scrape of `screener exporter` over a 10,000-node fleet in PostgreSQL.

    .venv/bin/python bench/exporter_scrape.py                  # 10,000 nodes x 7 nights
    .venv/bin/python bench/exporter_scrape.py --nodes 1000 --days 3

Seeds a scratch database (created here, dropped at the end; never the `test` database the
tests use) with bench/fleet_scale.py's synthetic fleet through screener's own write path,
then serves it with the real exporter (`screener exporter --listen`, its own process, a
loopback port) and times HTTP GETs of /metrics sent the way Prometheus sends them (its
Accept and Accept-Encoding headers) until the whole body has arrived. The first scrape is
reported apart: it also adds up the probe-duration histogram over every stored probe
(later scrapes read only new probes). Also timed in this process: the exporter's node
query alone, ``exposition.render``, gzip, and prometheus_client's own ``generate_latest``
of the same registry (what the exporter used before).
Writes bench/results/exporter_scrape.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from bench.fleet_scale import (  # noqa: E402
    PG_ADMIN,
    Fleet,
    _admin,
    _new_pg_db,
    add_episodes,
    ingest,
)
from screener.metrics import StoreCollector  # noqa: E402
from screener.metrics.exposition import render  # noqa: E402
from screener.store import open_store, views  # noqa: E402

RESULTS = ROOT / "bench" / "results"
# What Prometheus 2.x sends (scrape_classic_histograms off, gzip on).
PROM_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
PER_NODE = (
    "screener_node_read_bytes_per_second",
    "screener_node_write_bytes_per_second",
    "screener_node_write_read_ratio",
    "screener_node_read_latency_p99_seconds",
    "screener_node_verdict",
    "screener_node_drained_by_screener",
    "screener_node_last_probe_age_seconds",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> tuple[float, bytes]:
    """One GET as Prometheus sends it: (seconds until the whole body arrived, body as sent).
    Decompressing is left out of the time: Prometheus does that in its own process."""
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=PROM_HEADERS)) as resp:
        wire = resp.read()
    return time.perf_counter() - t, wire


def stats_ms(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {
        "p50": statistics.median(s) * 1e3,
        "p95": s[max(round(0.95 * len(s)) - 1, 0)] * 1e3,
        "max": s[-1] * 1e3,
        "n": len(s),
    }


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def serve_and_scrape(url: str, repeat: int, reuse_s: float) -> tuple[float, list[float], bytes]:
    """Run `screener exporter --reuse-seconds REUSE_S` on the store at ``url`` (its own
    process, as deployed) and scrape it: (first scrape, the next ``repeat``, last body)."""
    listen = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCREENER_")}
    env["SCREENER_DATABASE_URL"] = url
    argv = [sys.executable, "-m", "screener.cli", "exporter", "--listen", listen]
    exporter = subprocess.Popen(
        [*argv, "--reuse-seconds", str(reuse_s)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    metrics_url = f"http://{listen}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:  # the first scrape also adds up the histogram over every stored probe
            try:
                first, wire = scrape(metrics_url)
                break
            except OSError:
                if time.monotonic() > deadline or exporter.poll() is not None:
                    raise SystemExit("exporter did not answer") from None
                time.sleep(0.1)
        times = [scrape(metrics_url)[0] for _ in range(repeat)]
        wire = scrape(metrics_url)[1]
    finally:
        exporter.terminate()
        exporter.wait(timeout=30)
    return first, times, wire


def measure(url: str, repeat: int) -> dict[str, Any]:
    """HTTP scrapes with the figures read at every scrape (what a scrape costs after a
    verdict, node or drain was added) and reused (the fleet unchanged since the last
    scrape, the usual case between sweeps); then the parts, timed in this process."""
    out: dict[str, Any] = {}
    first, times, wire = serve_and_scrape(url, repeat, 0.0)
    out["scrape_http_first_ms"] = first * 1e3
    out["scrape_http_ms"] = stats_ms(times)  # the headline: the store read at every scrape
    _, reused, _ = serve_and_scrape(url, repeat, 60.0)
    out["scrape_http_unchanged_ms"] = stats_ms(reused)
    body = gzip.decompress(wire)
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    out["body_bytes"] = len(body)
    out["wire_bytes_gzip"] = len(wire)
    out["samples"] = sum(len(f.samples) for f in fams.values())
    out["series_per_node_family"] = {n: len(fams[n].samples) for n in PER_NODE}
    with open_store(url) as store:  # the parts, in this process
        registry = CollectorRegistry()
        registry.register(StoreCollector(store, reuse_s=0.0))
        render(registry)  # histogram caught up
        reusing = CollectorRegistry()
        reusing.register(StoreCollector(store, reuse_s=60.0))
        render(reusing)
        out["node_columns_query_ms"] = stats_ms(timed(lambda: views.node_columns(store), 5))
        out["render_ms"] = stats_ms(timed(lambda: render(registry), 5))
        out["render_unchanged_ms"] = stats_ms(timed(lambda: render(reusing), 5))
        out["gzip_level1_ms"] = stats_ms(timed(lambda: gzip.compress(body, compresslevel=1), 5))
        out["prometheus_client_generate_latest_ms"] = stats_ms(
            timed(lambda: generate_latest(registry), 3)
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--days", type=int, default=7, help="nightly sweeps stored per node")
    ap.add_argument("--repeat", type=int, default=20, help="timed scrapes after the first")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--reuse", metavar="DB", help="measure a kept database; no seeding, no drop")
    args = ap.parse_args()
    fleet = Fleet(args.nodes, args.days)
    out: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {os.cpu_count()} cpus (shared), {platform.python_version()}",
        "load_avg_start": os.getloadavg(),
        "nodes": args.nodes,
        "days": args.days,
    }
    if args.reuse:
        url = make_url(PG_ADMIN).set(database=args.reuse).render_as_string(hide_password=False)
        out |= measure(url, args.repeat)
        out["reused_database"] = True
        print(json.dumps(out, indent=2))
        return 0  # figures of a reused database are printed, not written to results
    name, url = _new_pg_db("scrape")
    try:
        with open_store(url) as store:
            ours, _, rows, nights = ingest(store, fleet, None)  # no COPY baseline here
            secs = sum(ours)
            add_episodes(store, nights)
            with store.engine.begin() as conn:
                conn.execute(text("ANALYZE"))
        print(f"seeded {args.nodes:,} nodes x {args.days} nights ({rows:,} rows) in {secs:.0f} s")
        out |= measure(url, args.repeat)
    finally:
        if args.keep:
            print(f"kept database {name}")
        else:
            _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    out["load_avg_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    RESULTS.mkdir(exist_ok=True)
    dest = RESULTS / "exporter_scrape.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
