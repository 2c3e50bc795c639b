"""Does the chosen probe separate a 4x slow reader from healthy peers? Measure it.

On an 8-node emulated cluster: several healthy screens give the spread of each node's
sequential read around the peer median (robust z in log space, as the verdict uses it);
then one node is throttled to a quarter of the healthy median and screened again.
Writes bench/results/separation.json.

    .venv/bin/python bench/separation.py [--healthy 4] [--slow 3]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.screen_overhead import bench_policy, one_screen
from deploy.minicluster.cluster import Cluster
from screener import __version__

RESULTS = Path(__file__).resolve().parent / "results" / "separation.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--healthy", type=int, default=4)
    ap.add_argument("--slow", type=int, default=3)
    args = ap.parse_args()
    cluster = Cluster("/tmp/screener-bench-separation")
    info = cluster.up(nodes=8, subnet="127.0.31", slurm_port_base=19500, timeout=300)
    policy = bench_policy(info.scratch, info.ssh_config, info.known_hosts)
    healthy_z: list[float] = []
    healthy_rel: list[float] = []
    medians: list[float] = []
    slow_runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/sep.db"
            for _ in range(args.healthy):
                r = one_screen(info.nodes, policy, url)
                med = r.summary.peer_read_median_mb_s or 0.0
                medians.append(med)
                for v in r.summary.verdicts:
                    if v.z_read is not None and v.read_mb_s:
                        healthy_z.append(v.z_read)
                        healthy_rel.append(v.read_mb_s / med)
                print(f"healthy: median {med:,.0f} MB/s, statuses {_statuses(r)}", flush=True)
            rate = int(statistics.median(medians) * 1e6 / 4)  # a 4x slow reader
            slow = info.nodes[4]
            cluster.inject(slow, "slow_read", rate)
            for _ in range(args.slow):
                r = one_screen(info.nodes, policy, url)
                v = next(v for v in r.summary.verdicts if v.node == slow)
                others = [x.status.value for x in r.summary.verdicts if x.node != slow]
                slow_runs.append(
                    {
                        "status": v.status.value,
                        "read_mb_s": round(v.read_mb_s or 0, 1),
                        "z_read": round(v.z_read or 0, 2),
                        "signals": list(v.signals),
                        "others_ok": others.count("OK"),
                        "others": len(others),
                    }
                )
                print(f"4x slow {slow}: {slow_runs[-1]}", flush=True)
    finally:
        cluster.down()
    doc = {
        "benchmark": "separation",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "screener": __version__,
        "cores": os.cpu_count(),
        "probe": "3 fio jobs x (0.5 s ramp + 1.5 s), 64 MiB region, QD32, direct=1, 8 nodes",
        "healthy_runs": args.healthy,
        "healthy_read_median_mb_s": [round(m, 1) for m in medians],
        "healthy_z_min": round(min(healthy_z), 2),
        "healthy_z_max": round(max(healthy_z), 2),
        "healthy_read_vs_median_min": round(min(healthy_rel), 3),
        "healthy_read_vs_median_max": round(max(healthy_rel), 3),
        "slow_injected_bps": rate,
        "slow_runs": slow_runs,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "slow_runs"}, indent=2))
    print(f"wrote {RESULTS}")
    return 0


def _statuses(r: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in r.summary.verdicts:  # type: ignore[attr-defined]
        out[v.status.value] = out.get(v.status.value, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
