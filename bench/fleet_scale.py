"""The store at fleet scale: a synthetic fleet of N nodes x D nightly sweeps, its ingest rate
against a raw psycopg COPY of the same rows, and the admin queries' latencies.

    .venv/bin/python bench/fleet_scale.py                      # 10,000 nodes x 365 nights, PG
    .venv/bin/python bench/fleet_scale.py --nodes 500 --days 30  # CI-sized
    .venv/bin/python bench/fleet_scale.py --backend sqlite --nodes 1000

Per node and night the sweep stores what screener stores: a node_probes row, three
probe_jobs rows (seq write, seq read, rand read), a node_facts row and a verdict; slow
streaks open and close episodes with drain/resume events. Not stored: raw fio/iostat text
and iostat samples (their size is reported separately from a real probe). PostgreSQL: two
fresh databases on the server, one filled by raw COPY (the baseline, rows prepared before
the clock starts) and one by screener's own path (Store.start_run + bulk.record_round +
Store.record_verdicts, conversion from model objects inside the clock), night by night in
turn (order alternating), so both see the same load on a shared machine; queries run on
the latter. Writes bench/results/fleet_scale_<backend>.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import random
import secrets
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry  # noqa: E402
from rich.console import Console  # noqa: E402
from sqlalchemy import create_engine, insert, select, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from screener.cli import admin  # noqa: E402
from screener.metrics import StoreCollector  # noqa: E402
from screener.metrics.exposition import render  # noqa: E402
from screener.probe_data import (  # noqa: E402
    FioJobResult,
    NodeFacts,
    NodeProbe,
    RunSummary,
    SmartLog,
    Status,
    Trigger,
    Verdict,
)
from screener.report import terminal  # noqa: E402
from screener.store import Store, bulk, convert, open_store, views  # noqa: E402
from screener.store.migrate import upgrade  # noqa: E402
from screener.store.tables import EpisodeRecord, EventRecord, NodeRecord  # noqa: E402

PG_ADMIN = os.environ.get("SCREENER_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1/test")
RESULTS = ROOT / "bench" / "results"
SLOW_START_P = 0.004  # chance per node and night that a slow streak starts
LOADS: list[float] = []  # 1-minute load average after each night


@dataclass
class Fleet:
    """Deterministic synthetic fleet: per night the probes, verdicts and state changes."""

    nodes: int
    days: int
    seed: int = 42
    start: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))

    def names(self) -> list[str]:
        return [f"cn{i:05d}" for i in range(self.nodes)]

    def nights(self) -> Iterator[tuple[datetime, list[NodeProbe], list[Verdict]]]:
        rng = random.Random(self.seed)
        names = self.names()
        streak = [0] * self.nodes
        t0 = self.start - timedelta(days=self.days)
        for d in range(self.days):
            at = t0 + timedelta(days=d, hours=rng.random())
            probes, verdicts = [], []
            for i, name in enumerate(names):
                if streak[i] == 0 and rng.random() < SLOW_START_P:
                    streak[i] = rng.randint(1, 3)
                slow = streak[i] > 0
                streak[i] = max(streak[i] - 1, 0)
                read = rng.uniform(15, 300) if slow else rng.gauss(3000, 80)
                write = rng.gauss(3100, 60)
                probes.append(_probe(name, read, write, rng))
                verdicts.append(_verdict(name, read, write, slow))
            yield at, probes, verdicts


def _job(name: str, rw: str, bw_mb: float, p99_ms: float) -> FioJobResult:
    return FioJobResult(
        name=name,
        rw=rw,
        bw_bytes=bw_mb * 1e6,
        iops=bw_mb,
        total_ios=int(bw_mb * 10),
        runtime_ms=10000.0,
        lat_mean_ns=p99_ms * 4e5,
        lat_p50_ns=p99_ms * 3e5,
        lat_p99_ns=p99_ms * 1e6,
        lat_p999_ns=p99_ms * 2e6,
        slow_fraction=0.0,
    )


FACTS = NodeFacts(
    device="nvme0n1",
    pcie_speed="16.0 GT/s PCIe",
    pcie_max_speed="16.0 GT/s PCIe",
    pcie_width=4,
    pcie_max_width=4,
    scheduler="none",
    read_ahead_kb=128,
    nr_requests=1023,
    write_cache="write back",
    smart=SmartLog(critical_warning=0, temperature_c=41.0, media_errors=0, percentage_used=3),
)


def _probe(name: str, read: float, write: float, rng: random.Random) -> NodeProbe:
    p99 = 1500.0 if read < 500 else 2.0
    return NodeProbe(
        node=name,
        seq_write=_job("seq_write", "write", write, 2.0),
        seq_read=_job("seq_read", "read", read, p99),
        rand_read=_job("rand_read", "randread", 400.0, 0.5),
        fio_version="fio-3.33",
        facts=FACTS,
        duration_s=rng.uniform(8.5, 12.0) if read > 500 else rng.uniform(25, 40),
    )


def _verdict(name: str, read: float, write: float, slow: bool) -> Verdict:
    return Verdict(
        node=name,
        status=Status.SLOW_READ if slow else Status.OK,
        reason=f"{name}: read {read:,.0f} MB/s vs peers 3,000" if slow else "",
        read_mb_s=read,
        write_mb_s=write,
        rand_read_iops=400.0,
        ratio=write / read,
        read_p99_ms=1500.0 if slow else 2.0,
        z_read=-30.0 if slow else 0.1,
        confirmed=slow,
        signals=("peer_read", "ratio") if slow else (),
    )


# ---- PostgreSQL databases -----------------------------------------------------------------


def _admin(sql: str) -> None:
    engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def _new_pg_db(tag: str) -> tuple[str, str]:
    name = f"screener_bench_{tag}_{secrets.token_hex(3)}"
    _admin(f'CREATE DATABASE "{name}"')
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    return name, url


# ---- the two ingest paths -----------------------------------------------------------------


Nights = list[tuple[datetime, list[Verdict]]]


def screener_night(
    store: Store, names: list[str], at: datetime, probes: list[NodeProbe], verdicts: list[Verdict]
) -> tuple[int, float]:
    """One night by screener's own write path: (rows, seconds inside the clock)."""
    t = time.perf_counter()
    run = store.start_run(Trigger.SWEEP, names, {}, None, "cn[...]", at)
    bulk.record_round(store, run, probes)
    bulk.record_verdicts(store, run, RunSummary(tuple(verdicts), peer_read_median_mb_s=3000.0))
    store.finish_run(run, at + timedelta(minutes=3))
    return len(probes) * 6 + 1, time.perf_counter() - t  # probe, 3 jobs, facts, verdict; run


class CopyBaseline:
    """Raw psycopg COPY of the same rows into its own database (same schema), rows
    prepared outside the clock."""

    def __init__(self, url: str, names: list[str]) -> None:
        import psycopg

        dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.conn = psycopg.connect(dsn)
        self.pid = 0
        self.node_ids = {}
        with self.conn.cursor() as cur:
            for n in names:
                cur.execute(
                    "INSERT INTO nodes (name, first_seen, last_seen) VALUES (%s, now(), now())"
                    " RETURNING id",
                    (n,),
                )
                self.node_ids[n] = cur.fetchone()[0]  # type: ignore[index]
        self.conn.commit()

    def night(
        self, at: datetime, probes: list[NodeProbe], verdicts: list[Verdict]
    ) -> tuple[int, float]:
        conn = self.conn
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO runs (trigger, nodeset, node_count, policy, started_at, status,"
                " shared_cause, shared_cause_reason, screener_version) VALUES"
                " ('sweep', 'cn[...]', %s, '{}', %s, 'done', false, '', 'bench') RETURNING id",
                (len(probes), at),
            )
            run = cur.fetchone()[0]  # type: ignore[index]
        tables: dict[str, list[dict[str, Any]]] = {
            "node_probes": [],
            "probe_jobs": [],
            "node_facts": [],
            "verdicts": [],
        }
        for p, v in zip(probes, verdicts, strict=True):
            self.pid += 1
            pid, nid = self.pid, self.node_ids[p.node]
            tables["node_probes"].append(
                {"id": pid, "run_id": run, "node_id": nid, "round": 1, **convert.probe_row(p)}
            )
            tables["probe_jobs"] += [{"node_probe_id": pid, **r} for r in convert.job_rows(p)]
            facts = convert.facts_row(p.facts) if p.facts else {}
            tables["node_facts"].append({"node_probe_id": pid, **facts})
            vr = convert.verdict_row(v)
            vr["signals"] = json.dumps(vr["signals"])
            tables["verdicts"].append({"run_id": run, "node_id": nid, "started_at": at, **vr})
        for f in tables["node_facts"]:
            for k in ("md_arrays", "md_degraded", "md_rebuilding"):
                f[k] = None if f[k] is None else json.dumps(f[k])
        rows = 1
        t = time.perf_counter()
        with conn.cursor() as cur:
            for table, trows in tables.items():
                cols = list(trows[0])
                with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy:
                    for r in trows:
                        copy.write_row([r[c] for c in cols])
                rows += len(trows)
        conn.commit()
        return rows, time.perf_counter() - t

    def close(self) -> None:
        self.conn.close()


def ingest(
    store: Store, fleet: Fleet, baseline: CopyBaseline | None
) -> tuple[list[float], list[float], int, Nights]:
    """Every night into both databases, alternating which goes first, so both paths see the
    same load on a shared machine: (screener seconds, COPY seconds, rows per path, nights)."""
    names = fleet.names()
    ours: list[float] = []
    theirs: list[float] = []
    rows = 0
    nights: Nights = []
    for d, (at, probes, verdicts) in enumerate(fleet.nights()):
        if baseline is not None and d % 2 == 1:
            theirs.append(baseline.night(at, probes, verdicts)[1])
        n, secs = screener_night(store, names, at, probes, verdicts)
        ours.append(secs)
        rows += n
        if baseline is not None and d % 2 == 0:
            theirs.append(baseline.night(at, probes, verdicts)[1])
        nights.append((at, verdicts))
        LOADS.append(os.getloadavg()[0])
    return ours, theirs, rows, nights


def add_episodes(store: Store, nights: Nights) -> int:
    """Episodes and drain/resume events from the slow streaks (what the Slurm side writes)."""
    with store.engine.begin() as conn:
        ids = dict(conn.execute(select(NodeRecord.name, NodeRecord.id)).all())
        open_at: dict[str, datetime] = {}
        eps: list[tuple[str, datetime, datetime | None]] = []
        evs: list[tuple[str, str, datetime, str | None]] = []
        for at, verdicts in nights:
            for v in verdicts:
                slow = v.status is Status.SLOW_READ
                if slow and v.node not in open_at:
                    open_at[v.node] = at
                    evs.append((v.node, "drain", at, "screener: slow read"))
                elif not slow and v.node in open_at:
                    start = open_at.pop(v.node)
                    eps.append((v.node, start, at))
                    evs.append((v.node, "resume", at, None))
        eps += [(n, s, None) for n, s in open_at.items()]
        if eps:
            conn.execute(
                insert(EpisodeRecord),
                [
                    {"node_id": ids[n], "trigger": "sweep", "started_at": s, "ended_at": e}
                    | {"reason": "slow read", "start_run_id": None, "end_run_id": None}
                    | {"job_id": None}
                    for n, s, e in eps
                ],
            )
        if evs:
            conn.execute(
                insert(EventRecord),
                [
                    {"node_id": ids[n], "action": a, "at": t, "reason": a, "slurm_reason": r}
                    | {"run_id": None}
                    for n, a, t, r in evs
                ],
            )
    return len(eps) + len(evs)


# ---- the queries --------------------------------------------------------------------------


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(round(0.95 * len(xs)) - 1, 0)]


def queries(store: Store, fleet: Fleet) -> dict[str, Any]:
    now = fleet.start
    rng = random.Random(7)
    names = fleet.names()
    sample = [rng.choice(names) for _ in range(200)]
    it = iter(sample * 2)
    hist = timed(lambda: views.node_history(store, next(it), now - timedelta(days=30)), 200)
    hist_year = timed(lambda: views.node_history(store, next(it), now - timedelta(days=366)), 100)
    flaky = timed(lambda: views.flaky(store, now - timedelta(days=30), 2), 5)
    # what the exporter serves (bench/exporter_scrape.py times it over HTTP): the figures
    # read at every scrape (as after a change), and reused while the fleet is unchanged
    registry, reusing = CollectorRegistry(), CollectorRegistry()
    registry.register(StoreCollector(store, clock=lambda: now, reuse_s=0.0))
    reusing.register(StoreCollector(store, clock=lambda: now, reuse_s=60.0))
    first = timed(lambda: render(registry), 1)
    scrape = timed(lambda: render(registry), 9)
    render(reusing)
    unchanged = timed(lambda: render(reusing), 9)
    size = len(render(registry))
    nodes_q = timed(lambda: views.node_overview(store, now), 3)

    def nodes_table() -> None:  # what `screener nodes` prints: summary + nodes needing a look
        rows = views.node_overview(store, now)
        console = Console(file=io.StringIO(), width=200)
        console.print(admin.nodes_summary(rows, 2 * 86400))
        look = [r for r in rows if admin.needs_a_look(r, 2 * 86400)]
        console.print(terminal.rows_table("nodes", look))

    def nodes_json() -> None:
        terminal.rows_json(views.node_overview(store, now))

    return {
        "history_30d_ms": {"p50": statistics.median(hist) * 1e3, "p95": p95(hist) * 1e3},
        "history_365d_ms": {
            "p50": statistics.median(hist_year) * 1e3,
            "p95": p95(hist_year) * 1e3,
        },
        "flaky_30d_ms": {"median": statistics.median(flaky) * 1e3, "max": max(flaky) * 1e3},
        "flaky_rows": len(views.flaky(store, now - timedelta(days=30), 2)),
        "scrape_first_ms": first[0] * 1e3,
        "scrape_ms": {
            "median": statistics.median(scrape) * 1e3,
            "p95": p95(scrape) * 1e3,
            "max": max(scrape) * 1e3,
        },
        "scrape_unchanged_ms": {
            "median": statistics.median(unchanged) * 1e3,
            "p95": p95(unchanged) * 1e3,
        },
        "scrape_bytes": size,
        "nodes_query_ms": statistics.median(nodes_q) * 1e3,
        "nodes_table_ms": statistics.median(timed(nodes_table, 3)) * 1e3,
        "nodes_json_ms": statistics.median(timed(nodes_json, 3)) * 1e3,
    }


def requery(db: str, fleet: Fleet) -> int:
    """The queries again on a kept database (e.g. after a change to them): the ingest and
    COPY figures of the results file stay those of the run that filled it."""
    dest = RESULTS / "fleet_scale_postgres.json"
    out = json.loads(dest.read_text())
    if (out["nodes"], out["days"]) != (fleet.nodes, fleet.days):
        raise SystemExit(f"{dest.name} is of {out['nodes']} x {out['days']}, not this fleet")
    url = make_url(PG_ADMIN).set(database=db).render_as_string(hide_password=False)
    with open_store(url) as store:
        with store.engine.connect() as conn:
            newest = conn.scalar(text("SELECT max(started_at) FROM runs"))
        # the fleet's "now" was about a day after its last night (within the hour)
        fleet.start = newest + timedelta(days=1)
        out["queries"] = queries(store, fleet)
    out["queries_when"] = datetime.now(UTC).isoformat(timespec="seconds")
    out["queries_load_avg"] = os.getloadavg()
    print(json.dumps(out["queries"], indent=2))
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest.relative_to(ROOT)}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    ap.add_argument("--nodes", type=int, default=None, help="10,000 on PG, 1,000 on SQLite")
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--keep", action="store_true", help="keep the databases for a look")
    ap.add_argument("--no-copy", action="store_true", help="skip the COPY baseline")
    ap.add_argument(
        "--requery",
        metavar="DB",
        help="PostgreSQL: run the queries again on a database kept by --keep (same --nodes and"
        " --days) and replace the queries of bench/results/fleet_scale_postgres.json",
    )
    args = ap.parse_args()
    if args.requery:
        return requery(args.requery, Fleet(args.nodes or 10_000, args.days))
    nodes = args.nodes or (10_000 if args.backend == "postgres" else 1_000)
    fleet = Fleet(nodes, args.days)
    out: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {os.cpu_count()} cpus (shared), {platform.python_version()}",
        "backend": args.backend,
        "nodes": nodes,
        "days": args.days,
    }
    made: list[str] = []
    try:
        if args.backend == "postgres":
            name, url = _new_pg_db("ingest")
            made.append(name)
        else:
            path = Path(f"/tmp/screener_bench_{secrets.token_hex(3)}.db")
            url = f"sqlite:///{path}"
            upgrade(url)
        baseline = None
        if args.backend == "postgres" and not args.no_copy:
            cname, curl = _new_pg_db("copy")
            made.append(cname)
            baseline = CopyBaseline(curl, fleet.names())
        with open_store(url) as store:
            try:
                ours, theirs, rows, nights = ingest(store, fleet, baseline)
            finally:
                if baseline is not None:
                    baseline.close()
            secs = sum(ours)
            out["load_avg_1m_during_ingest"] = {
                "min": min(LOADS),
                "median": statistics.median(LOADS),
                "max": max(LOADS),
            }
            out["ingest"] = {"rows": rows, "seconds": secs, "rows_per_s": rows / secs}
            print(f"screener ingest: {rows:,} rows in {secs:.1f} s = {rows / secs:,.0f} rows/s")
            if theirs:
                csecs = sum(theirs)
                out["copy"] = {"rows": rows, "seconds": csecs, "rows_per_s": rows / csecs}
                out["ingest_vs_copy"] = csecs / secs
                out["method"] = (
                    "nights interleaved: each night into both databases, order alternating"
                )
                per_night = sorted(c / s for s, c in zip(ours, theirs, strict=True))
                out["ingest_vs_copy_per_night"] = {
                    "median": statistics.median(per_night),
                    "p10": per_night[len(per_night) // 10],
                    "p90": per_night[len(per_night) * 9 // 10],
                }
                print(
                    f"raw COPY: {rows:,} rows in {csecs:.1f} s = {rows / csecs:,.0f} rows/s; "
                    f"screener/COPY = {out['ingest_vs_copy']:.2f}"
                )
            out["episodes_and_events"] = add_episodes(store, nights)
            del nights
            with store.engine.begin() as conn:
                conn.execute(text("ANALYZE"))
            if args.backend == "postgres":
                with store.engine.connect() as conn:
                    size = conn.scalar(text("SELECT pg_database_size(current_database())"))
            else:
                store.engine.dispose()  # then fold the WAL into the file and weigh it
                with sqlite3.connect(path) as raw:
                    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                size = path.stat().st_size
            out["db_bytes"] = int(size or 0)
            out["bytes_per_node_year"] = out["db_bytes"] / (nodes * args.days / 365)
            print(
                f"database: {out['db_bytes'] / 2**20:,.0f} MiB, "
                f"{out['bytes_per_node_year'] / 2**20:.2f} MiB per node-year"
            )
            out["load_avg_before_queries"] = os.getloadavg()
            out["queries"] = queries(store, fleet)
            print(json.dumps(out["queries"], indent=2))
    finally:
        if not args.keep:
            for name in made:
                _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if args.backend == "sqlite":
                for f in path.parent.glob(path.name + "*"):
                    f.unlink()
    RESULTS.mkdir(exist_ok=True)
    dest = RESULTS / f"fleet_scale_{args.backend}.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
