"""Screening overhead: wall time of `screen` minus the longest single node's probe time.

Runs on emulated clusters of 8 and 32 nodes (brought up here, taken down after unless
--keep), healthy. When noise makes a node a suspect there is a second round; the longest
probe of each round is then subtracted. The probe itself is fixed-length (time-based fio);
what is left is fan-out, parsing, deciding and storing. Targets: <= 1.5 s at 8 nodes,
<= 3 s at 32. Writes bench/results/screen_overhead.json.

    .venv/bin/python bench/screen_overhead.py [--sizes 8 32] [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.minicluster.cluster import Cluster
from screener import __version__
from screener.app import make_transport
from screener.pipeline import ScreenRequest, ScreenResult, screen
from screener.policy import Policy, policy_from_dict
from screener.store import open_store

RESULTS = Path(__file__).resolve().parent / "results" / "screen_overhead.json"


def bench_policy(scratch: str, ssh_config: Path, known_hosts: Path) -> Policy:
    """The probe used for the figures: 3 jobs x (0.5 s ramp + 1.5 s) on a 64 MiB region."""
    return policy_from_dict(
        {
            "probe": {"target": scratch, "size_mib": 64, "runtime_s": 1.5, "ramp_s": 0.5},
            "transport": {"ssh_config": str(ssh_config), "known_hosts": str(known_hosts)},
        }
    )


def one_screen(nodes: list[str], policy: Policy, db_url: str) -> ScreenResult:
    store = open_store(db_url, upgrade=True)

    async def go() -> ScreenResult:
        transport = make_transport(policy.transport)
        try:
            return await screen(ScreenRequest(tuple(nodes), policy), transport, store)
        finally:
            await transport.close()

    return asyncio.run(go())


def measure(size: int, repeat: int, keep: bool) -> dict[str, object]:
    cluster = Cluster(f"/tmp/screener-bench-{size}")
    t0 = time.monotonic()
    info = cluster.up(nodes=size, subnet="127.0.30", slurm_port_base=19000, timeout=600)
    up_s = time.monotonic() - t0
    policy = bench_policy(info.scratch, info.ssh_config, info.known_hosts)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/bench.db"
            for _ in range(repeat):
                r = one_screen(info.nodes, policy, url)
                slow = [v.node for v in r.summary.verdicts if v.status != "OK"]
                runs.append(
                    {
                        "wall_s": round(r.wall_s, 3),
                        "longest_probe_s": round(r.longest_probe_s, 3),
                        "overhead_s": round(r.overhead_s, 3),
                        "rounds": r.rounds,
                        "reprobed": list(r.reprobed),
                        "not_ok": slow,
                    }
                )
                print(f"  {size} nodes: {runs[-1]}", flush=True)
    finally:
        if not keep:
            cluster.down()
    overheads = [float(r["overhead_s"]) for r in runs]  # type: ignore[arg-type]
    return {
        "nodes": size,
        "up_s": round(up_s, 2),
        "runs": runs,
        "overhead_median_s": round(statistics.median(overheads), 3),
        "overhead_max_s": round(max(overheads), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the clusters up")
    args = ap.parse_args()
    results = [measure(n, args.repeat, args.keep) for n in args.sizes]
    doc = {
        "benchmark": "screen_overhead",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "screener": __version__,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "probe": "3 fio jobs x (0.5 s ramp + 1.5 s), 64 MiB region, QD32, direct=1",
        "targets_s": {"8": 1.5, "32": 3.0},
        "results": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{'nodes':>5} {'median overhead s':>18} {'max s':>7} {'up s':>6}")
    for r in results:
        print(
            f"{r['nodes']:>5} {r['overhead_median_s']:>18} {r['overhead_max_s']:>7} {r['up_s']:>6}"
        )
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
