"""How far apart are healthy and sick nodes, rule by rule? Measure it on the emulated cluster.

On an 8-node emulated cluster (its own test slot), with one SQLite store across phases:

1. healthy screens: the spread of seq read around the peer median (robust z in log space,
   as the verdict uses it) and of the read latency tails (p99, p99.9 vs the peers' median);
2. a 4x slow reader (blkio read throttle at a quarter of the healthy median);
3. an intermittently stalling reader (throttle at 1 MB/s for 0.5 s out of every 1.5 s);
4. a fleet-wide 6x slowdown (reads and writes) with one node 50x slow inside it, judged
   against the healthy history of phase 1.

Writes bench/results/separation.json.

    .venv/bin/python bench/separation.py [--healthy 3] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.screen_overhead import bench_policy, one_screen
from bench.stall import Stall
from deploy.minicluster.cluster import Cluster
from deploy.minicluster.slots import claim_slot
from screener import __version__
from screener.pipeline import ScreenResult

RESULTS = Path(__file__).resolve().parent / "results" / "separation.json"


def _node(r: ScreenResult, node: str) -> dict[str, Any]:
    """One node's verdict with its figures relative to the other nodes of the run."""
    v = next(v for v in r.summary.verdicts if v.node == node)
    others = [x for x in r.summary.verdicts if x.node != node and x.read_mb_s]
    p99 = statistics.median(x.read_p99_ms or 0 for x in others) if others else 0.0
    p999 = statistics.median(x.read_p999_ms or 0 for x in others) if others else 0.0
    read = statistics.median(x.read_mb_s or 0 for x in others) if others else 0.0
    return {
        "status": v.status.value,
        "confirmed": v.confirmed,
        "signals": list(v.signals),
        "read_mb_s": round(v.read_mb_s or 0, 1),
        "read_vs_others": round((v.read_mb_s or 0) / read, 3) if read else None,
        "z_read": None if v.z_read is None else round(v.z_read, 2),
        "read_p99_ms": round(v.read_p99_ms or 0, 1),
        "read_p99_vs_others": round((v.read_p99_ms or 0) / p99, 1) if p99 else None,
        "read_p999_ms": round(v.read_p999_ms or 0, 1),
        "read_p999_vs_others": round((v.read_p999_ms or 0) / p999, 1) if p999 else None,
        "others": _statuses(r, exclude=node),
        "shared_cause": r.summary.shared_cause,
        "reason": v.reason,
    }


def _statuses(r: ScreenResult, exclude: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    for v in r.summary.verdicts:
        if v.node != exclude:
            out[v.status.value] = out.get(v.status.value, 0) + 1
    return out


def _healthy(runs: list[ScreenResult]) -> dict[str, Any]:
    """Spread of healthy nodes: bandwidth vs median, z, and tails vs the peers' median."""
    z, rel, p99, p999, signals = [], [], [], [], 0
    for r in runs:
        med = r.summary.peer_read_median_mb_s or 0.0
        m99 = statistics.median(v.read_p99_ms or 0 for v in r.summary.verdicts)
        m999 = statistics.median(v.read_p999_ms or 0 for v in r.summary.verdicts)
        for v in r.summary.verdicts:
            signals += bool(v.signals)
            if v.z_read is not None and v.read_mb_s:
                z.append(v.z_read)
                rel.append(v.read_mb_s / med)
            p99.append((v.read_p99_ms or 0) / m99 if m99 else 0)
            p999.append((v.read_p999_ms or 0) / m999 if m999 else 0)
    all_p999 = [v.read_p999_ms or 0 for r in runs for v in r.summary.verdicts]
    return {
        "runs": len(runs),
        "read_median_mb_s": [round(r.summary.peer_read_median_mb_s or 0, 1) for r in runs],
        "z_read_min": round(min(z), 2),
        "z_read_max": round(max(z), 2),
        "read_vs_median_min": round(min(rel), 3),
        "read_vs_median_max": round(max(rel), 3),
        "read_p99_vs_median_max": round(max(p99), 2),
        "read_p999_vs_median_max": round(max(p999), 2),
        "read_p999_ms_max": round(max(all_p999), 1),
        "nodes_with_any_signal": signals,
        "statuses": [_statuses(r) for r in runs],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--healthy", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    doc: dict[str, Any] = {"benchmark": "separation", "screener": __version__}
    with claim_slot() as slot, tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(slot.state_dir)
        info = cluster.up(nodes=8, subnet=slot.subnet, slurm_port_base=slot.slurm_port_base)
        policy = bench_policy(info.scratch, info.ssh_config, info.known_hosts)
        url = f"sqlite:///{tmp}/sep.db"
        nodes = info.nodes

        def screen() -> ScreenResult:
            return one_screen(nodes, policy, url)

        try:
            healthy = [screen() for _ in range(args.healthy)]
            doc["healthy"] = _healthy(healthy)
            print("healthy", json.dumps(doc["healthy"]), flush=True)
            med = statistics.median(r.summary.peer_read_median_mb_s or 0 for r in healthy)
            wmed = statistics.median(v.write_mb_s or 0 for r in healthy for v in r.summary.verdicts)

            slow = nodes[4]
            cluster.inject(slow, "slow_read", int(med * 1e6 / 4))
            doc["reader_4x"] = [_node(screen(), slow) for _ in range(args.repeat)]
            print("4x", json.dumps(doc["reader_4x"]), flush=True)
            cluster.heal(slow)

            stall = nodes[3]
            runs = []
            for _ in range(args.repeat):
                with Stall(cluster, stall, rate=1_000_000, on_s=0.5, off_s=1.0):
                    runs.append(_node(screen(), stall))
            doc["stalling_reader"] = runs
            print("stall", json.dumps(runs), flush=True)

            bad = nodes[2]
            for n in nodes:
                cluster.inject(n, "slow_read", int(med * 1e6 / 6))
                cluster.inject(n, "slow_write", int(wmed * 1e6 / 6))
            cluster.inject(bad, "slow_read", int(med * 1e6 / 50))
            doc["fleet_6x_with_50x"] = [_node(screen(), bad) for _ in range(args.repeat)]
            print("fleet", json.dumps(doc["fleet_6x_with_50x"]), flush=True)
        finally:
            cluster.down()
    doc.update(
        {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cores": os.cpu_count(),
            "probe": "3 fio jobs x (0.5 s ramp + 1.5 s), 64 MiB region, QD32, direct=1, 8 nodes",
            "healthy_read_median_mb_s": round(med, 1),
            "stall": "blkio read throttle 1 MB/s for 0.5 s every 1.5 s",
        }
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
