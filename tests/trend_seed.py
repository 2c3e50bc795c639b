"""Sweeps with a declining node, for the early-warning tests of `screener nodes` and of the
dashboards' trend panel (issue 46): four nodes whose seq reads are this machine's captured
healthy round-1 ratios (tests/data/trend/bench_healthy_round1.json), node01's falling 7 % a
sweep beside its peers. Written through the Store API, as the pipeline records a sweep."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from store_data import full_probe

from screener.probe_data import NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import Store

DATA = Path(__file__).parent / "data" / "trend" / "bench_healthy_round1.json"
HEALTHY: list[list[float]] = [s["ratios"] for s in json.loads(DATA.read_text())["series"]]
NAMES = ["node01", "node02", "node03", "node04"]
DECLINING = "node01"


def sweep(store: Store, when: datetime, reads: dict[str, float]) -> int:
    """A nightly sweep: each node's round-1 probe (the captured real fio output, its seq
    read set to ``reads`` MB/s), OK verdicts and the round's peer medians; its run id."""
    nodes = sorted(reads)
    run = store.start_run(Trigger.SWEEP, nodes, {}, None, ",".join(nodes), when)
    base = full_probe()
    assert base.seq_read is not None and base.rand_read is not None
    for n in nodes:
        seq = replace(base.seq_read, bw_bytes=reads[n] * 1e6)
        probe: NodeProbe = replace(base, node=n, seq_read=seq, recipe="r1")
        store.record_probe(run, probe, 1)
    median = sorted(reads.values())[len(reads) // 2]
    verdicts = tuple(Verdict(n, Status.OK, "ok", read_mb_s=reads[n], recipe="r1") for n in nodes)
    summary = RunSummary(
        verdicts=verdicts, peer_read_median_mb_s=median, peer_rand_median_iops=base.rand_read.iops
    )
    store.record_verdicts(run, summary)
    store.finish_run(run, when + timedelta(minutes=5))
    return run


def seed_declining(store: Store, last: datetime, sweeps: int = 8, fleet_fall: bool = False) -> int:
    """``sweeps`` nightly sweeps ending at ``last``: node01 reads 7 % less each sweep beside
    its peers; with ``fleet_fall`` every node falls together (the peer median with them).
    The last sweep's run id. The trend marks are the caller's: a sweep job refreshes them
    after its run (trend_marks.refresh_marks)."""
    run = 0
    for k in range(sweeps):
        reads = {n: 300.0 * HEALTHY[i][k] for i, n in enumerate(NAMES)}
        for n in reads:
            if n == DECLINING or fleet_fall:
                reads[n] *= 0.93**k
        run = sweep(store, last - timedelta(days=sweeps - 1 - k), reads)
    return run
