"""A screened, ingested job on top of admin_seed's fleet, for the accuracy gauges and the
dashboard panels that show them: job 5150 in partition "batch", screened by a prolog run
3 hours ago (every node OK, no probes: the fleet's latest verdicts and probe counts stay
as admin_seed made them), then ingested from the real slow-rank IOR outputs
(tests/data/ior/) with rank 2 on node04 -- so node04 is one miss and three nodes stayed OK."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from screener.ingest.files import load_files
from screener.ingest.judge import judge_job
from screener.ingest.layout import block_layout
from screener.ingest.service import store_rows
from screener.policy import VerdictPolicy
from screener.probe_data import RunSummary, Status, Trigger, Verdict
from screener.store import Store
from screener.store.jobs import IngestHead, record_ingest

DATA = Path(__file__).resolve().parent / "data" / "ior"
JOB = "5150"
PARTITION = "batch"
RANK_NODES = ["node01", "node02", "node04", "node03"]  # rank 2 (the slow one) ran on node04
MISSED = "node04"


def seed_accuracy(store: Store, now: datetime) -> None:
    """Write the job above (call after seed_fleet)."""
    nodes = sorted(RANK_NODES)
    at = now - timedelta(hours=3)
    run = store.start_run(Trigger.PROLOG, nodes, {"seeded": True}, JOB, "node[01-04]", at)
    store.record_verdicts(
        run, RunSummary(tuple(Verdict(n, Status.OK, "seeded: passed") for n in nodes))
    )
    store.finish_run(run, at + timedelta(seconds=20))
    files = load_files(
        [DATA / "ior-fpp-slowrank-summary.json", DATA / "ior-fpp-slowrank-ranks.csv"]
    )
    figures = judge_job(files, block_layout(RANK_NODES, 1), VerdictPolicy())
    assert [s.node for s in figures.slow] == [MISSED]
    rows, slow = store_rows(figures)
    head = IngestHead(
        job_id=JOB,
        partition=PARTITION,
        nodeset="node[01-04]",
        layout="block, 1 per node over 4 nodes (seeded)",
        files=tuple(f"{f.kind.value}:{f.name}" for f in files),
        notes=figures.notes,
        observed_at=at + timedelta(minutes=30),
    )
    record_ingest(store, head, rows, slow, now=at + timedelta(hours=1))
