"""One Prometheus scrape of `screener exporter` over a 10,000-node fleet in PostgreSQL.

    .venv/bin/python bench/exporter_scrape.py                  # 10,000 nodes x 7 nights
    .venv/bin/python bench/exporter_scrape.py --nodes 1000 --days 3

Seeds a scratch database (created here, dropped at the end; never the `test` database the
tests use) with bench/fleet_scale.py's synthetic fleet through screener's own write path,
then serves it with the real exporter (`metrics.serve`, a loopback port) and times HTTP GETs
of /metrics sent the way Prometheus sends them (its Accept and Accept-Encoding headers),
body read and decompressed. The first scrape is reported apart: it also adds up the
probe-duration histogram over every stored probe (later scrapes read only new probes).
Also timed in-process: the node query alone, ``exposition.render`` and prometheus_client's
own ``generate_latest`` of the same registry (what the exporter used before).
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
import sys
import threading
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
    ingest_screener,
)
from screener.metrics import StoreCollector, serve  # noqa: E402
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


def scrape(url: str) -> tuple[float, bytes, int]:
    """One GET as Prometheus does it: (seconds, body, bytes on the wire)."""
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=PROM_HEADERS)) as resp:
        wire = resp.read()
        body = gzip.decompress(wire) if resp.headers.get("Content-Encoding") == "gzip" else wire
    return time.perf_counter() - t, body, len(wire)


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


def measure(url: str, repeat: int) -> dict[str, Any]:
    """Serve the store at ``url`` and time the scrapes."""
    out: dict[str, Any] = {}
    with open_store(url) as store:
        registry = CollectorRegistry()
        registry.register(StoreCollector(store))
        stop = threading.Event()
        listen = f"127.0.0.1:{free_port()}"
        server = threading.Thread(target=serve, args=(registry, listen, stop), daemon=True)
        server.start()
        metrics_url = f"http://{listen}/metrics"
        try:
            for _ in range(100):  # the server thread binds the port
                try:
                    first, body, wire = scrape(metrics_url)
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                raise SystemExit("exporter did not answer")
            times = []
            for _ in range(repeat):
                t, body, wire = scrape(metrics_url)
                times.append(t)
        finally:
            stop.set()
            server.join(timeout=10)
        fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
        series = {n: len(fams[n.removesuffix("_total")].samples) for n in PER_NODE}
        out["scrape_http_first_ms"] = first * 1e3
        out["scrape_http_ms"] = stats_ms(times)
        out["body_bytes"] = len(body)
        out["wire_bytes_gzip"] = wire
        out["samples"] = sum(len(f.samples) for f in fams.values())
        out["series_per_node_family"] = series
        now = datetime.now(UTC)
        out["node_query_ms"] = stats_ms(timed(lambda: views.node_overview(store, now), 5))
        out["render_ms"] = stats_ms(timed(lambda: render(registry), 5))
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
            rows, secs, nights = ingest_screener(store, fleet)
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
