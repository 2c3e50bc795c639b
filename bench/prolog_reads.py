"""The prolog's read of each node's latest verdicts on a store with a long history: the
bounded read (per node, a newest-first index walk that stops at its first row) against the
read it replaced, which loaded every verdict row of the job's nodes and kept the first per
node, once per question.

    .venv/bin/python bench/prolog_reads.py                   # SQLite and PostgreSQL
    .venv/bin/python bench/prolog_reads.py --runs 500 --backend sqlite

A synthetic history: ``--runs`` prolog runs over all ``--nodes`` nodes, alternating the
triage recipe and the full one (what a busy node gathers with triage on and fresh_s = 1 h is
~24-48 verdicts a day, so 3,000 is about two to four months). Writes
bench/results/prolog_reads.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, or_, select, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from bench.fleet_scale import timed  # noqa: E402
from screener.probe_data import RunSummary, Status, Trigger, Verdict  # noqa: E402
from screener.store import Store, bulk, open_store  # noqa: E402
from screener.store.migrate import upgrade  # noqa: E402
from screener.store.slurm_records import SlurmRecords  # noqa: E402
from screener.store.tables import NodeRecord, VerdictRecord  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "prolog_reads.json"
PG_ADMIN = os.environ.get(
    "SCREENER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
TRIAGE, FULL = "triage-recipe", "full-recipe"


def unbounded(
    store: Store, nodes: Sequence[str], exclude: str | None
) -> dict[str, tuple[str, datetime]]:
    """The read before this bench (kept here as the baseline): every row, first per node."""
    query = (
        select(NodeRecord.name, VerdictRecord.status, VerdictRecord.started_at)
        .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
        .where(NodeRecord.name.in_(list(nodes)))
    )
    if exclude is not None:
        recipe = VerdictRecord.recipe
        query = query.where(or_(recipe.is_(None), recipe != exclude))
    out: dict[str, tuple[str, datetime]] = {}
    with store.reading("bench") as conn:
        rows = conn.execute(
            query.order_by(
                NodeRecord.name, VerdictRecord.started_at.desc(), VerdictRecord.id.desc()
            )
        ).all()
    for r in rows:
        out.setdefault(r.name, (r.status, r.started_at))
    return out


def fill(store: Store, nodes: list[str], runs: int) -> float:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    t = time.perf_counter()
    for i in range(runs):
        at = start + timedelta(minutes=30 * i)
        recipe = TRIAGE if i % 2 else FULL
        run = store.start_run(Trigger.PROLOG, nodes, {}, str(i), "bench", at)
        verdicts = tuple(
            Verdict(node=n, status=Status.OK, reason="ok", read_mb_s=3000.0, recipe=recipe)
            for n in nodes
        )
        bulk.record_verdicts(store, run, RunSummary(verdicts))
        store.finish_run(run, at + timedelta(minutes=1))
    return time.perf_counter() - t


def measure(url: str, nodes: int, runs: int, repeat: int) -> dict[str, Any]:
    upgrade(url)
    names = [f"node{i:04d}" for i in range(nodes)]
    with open_store(url) as store:
        fill_s = fill(store, names, runs)
        records = SlurmRecords(store)
        out: dict[str, Any] = {"fill_s": round(fill_s, 1), "verdict_rows": nodes * runs}
        for job in (8, nodes):
            part = names[:job]
            new = records.latest_verdicts_apart(part, TRIAGE)
            old = (unbounded(store, part, None), unbounded(store, part, TRIAGE))
            assert new == old, "the two reads disagree"
            t_new = timed(lambda p=part: records.latest_verdicts_apart(p, TRIAGE), repeat)
            t_old = timed(
                lambda p=part: (unbounded(store, p, None), unbounded(store, p, TRIAGE)), repeat
            )
            out[f"job_{job}_nodes"] = {
                "bounded_ms": round(statistics.median(t_new) * 1e3, 2),
                "unbounded_twice_ms": round(statistics.median(t_old) * 1e3, 2),
            }
            print(
                f"  {job:3d}-node job: bounded {statistics.median(t_new) * 1e3:8.2f} ms,"
                f" unbounded x2 {statistics.median(t_old) * 1e3:8.2f} ms"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("both", "sqlite", "postgres"), default="both")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3000, help="verdicts per node")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    results: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg": os.getloadavg(),
        "nodes": args.nodes,
        "runs": args.runs,
        "repeat": args.repeat,
    }
    if args.backend in ("both", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            print(f"sqlite: {args.nodes} nodes x {args.runs} verdicts")
            results["sqlite"] = measure(
                f"sqlite:///{tmp}/bench.db", args.nodes, args.runs, args.repeat
            )
    if args.backend in ("both", "postgres"):
        name = f"screener_bench_reads_{os.getpid()}"
        admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            print(f"postgres: {args.nodes} nodes x {args.runs} verdicts")
            url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
            results["postgres"] = measure(url, args.nodes, args.runs, args.repeat)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
