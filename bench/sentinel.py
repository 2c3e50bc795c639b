"""The fast path's sentinel (issue 28): what it costs and which slowdowns it sees.

On a 4-node emulated cluster, every device paced to one rate (300 MB/s, so the 2 shared
cores do not decide), each node is screened once (its usual seq read). Then one node is
throttled to 1/1 (healthy), 1/1.5, 1/2, 1/3, 1/4, 1/10 and 1/25 of that rate, and the
sentinel runs on all four nodes at once, as the prolog runs it (asyncssh, the node's own
usual level, `prolog.sentinel_drop`), for each sentinel length. Per cell: how often the
throttled node failed the sentinel (detection), how often a healthy node did (false
alarms), the ratio it read, and the wall of one sentinel round over the four nodes.
Writes bench/results/sentinel.json. With ``--reader dd`` (issue 22) each node first learns
its dd level at each length (DD_READINGS_MIN rounds of fio sentinels with a dd reading
beside, as the prolog learns it) and the cells read with dd: bench/results/sentinel_dd.json.

    .venv/bin/python bench/sentinel.py [--repeat 5] [--reader fio|dd]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.minicluster import Cluster, ClusterHandle
from deploy.minicluster.slots import claim_slot
from screener import __version__
from screener.app import make_transport
from screener.policy import load_policy
from screener.probe.fio import recipe_fingerprint
from screener.prolog.sentinel import DD_READINGS_MIN, run_sentinels
from screener.store import open_store
from tests.hooked_cluster import SCREENER, write_config

RESULTS = Path(__file__).resolve().parent / "results" / "sentinel.json"
UNPACED = RESULTS.with_name("sentinel_unpaced.json")
DD = RESULTS.with_name("sentinel_dd.json")
NODES = 4
PACE_MB_S = 300
SLOWDOWNS = (1.0, 1.5, 2.0, 3.0, 4.0, 10.0, 25.0)
LENGTHS_S = (0.1, 0.25, 0.5)


def throttle(cluster: ClusterHandle, node: str, mb_s: float) -> None:
    cluster.inject(node, "slow_read", f"{int(mb_s)}M")
    cluster.inject(node, "slow_write", f"{PACE_MB_S}M")


async def one_round(
    cfg: Path,
    length: float,
    usual: dict[str, list[float]],
    reader: str = "fio",
    dd: dict[str, list[float]] | None = None,
) -> tuple[Any, float]:
    policy = load_policy(cfg)
    prolog = dataclasses.replace(policy.prolog, sentinel_s=length, sentinel_reader=reader)
    policy = dataclasses.replace(policy, prolog=prolog)
    transport = make_transport(policy.transport)
    try:
        t0 = time.monotonic()
        results = await run_sentinels(transport, list(usual), usual, policy, dd)
        return results, time.monotonic() - t0
    finally:
        await transport.close()


def learn(cfg: Path, length: float, usual: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each node's dd readings at ``length``, taken as the prolog takes them (dd first, then
    a fio sentinel that must read as usual), DD_READINGS_MIN rounds."""
    got: dict[str, list[float]] = {n: [] for n in usual}
    for _ in range(DD_READINGS_MIN):
        results, _ = asyncio.run(one_round(cfg, length, usual, "dd", {}))
        for r in results:
            if r.dd_reading:
                got[r.node].append(r.dd_reading)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--unpaced", action="store_true", help="no pacing: healthy nodes only")
    ap.add_argument("--nodes", type=int, default=NODES)
    ap.add_argument("--reader", choices=("fio", "dd"), default="fio", help="prolog.sentinel_reader")
    args = ap.parse_args()
    cells: list[dict[str, Any]] = []
    drop = 0.0
    with claim_slot() as slot, tempfile.TemporaryDirectory() as tmp:
        mc = Cluster(slot.state_dir)
        try:
            cluster = ClusterHandle(
                mc, mc.up(args.nodes, subnet=slot.subnet, slurm_port_base=slot.slurm_port_base)
            )
            db = f"sqlite:///{tmp}/screener.db"
            cfg = Path(tmp) / "screener.toml"
            write_config(cfg, cluster, db, Path(tmp) / "log")
            for n in [] if args.unpaced else cluster.nodes:
                throttle(cluster, n, PACE_MB_S)
            env = {**cluster.env(), "SCREENER_CONFIG": str(cfg)}
            base = subprocess.run(
                [str(SCREENER), "screen", ",".join(cluster.nodes)],
                env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert base.returncode == 0, base.stdout + base.stderr
            policy = load_policy(cfg)
            drop = policy.prolog.sentinel_drop
            with open_store(db) as store:
                usual = store.read_histories(
                    cluster.nodes, 5, recipe_fingerprint(policy.probe), None
                )
            victim, healthy = cluster.nodes[0], cluster.nodes[1:]
            dd_levels = {x: learn(cfg, x, usual) for x in LENGTHS_S} if args.reader == "dd" else {}
            for x, levels in dd_levels.items():
                print(
                    f"dd levels at {x} s (MB/s):",
                    {n: [round(v / 1e6) for v in r] for n, r in levels.items()},
                    flush=True,
                )
            for slowdown in (1.0,) if args.unpaced else SLOWDOWNS:
                if not args.unpaced:
                    throttle(cluster, victim, PACE_MB_S / slowdown)
                for length in LENGTHS_S:
                    caught = alarms = 0
                    ratios: list[float] = []
                    healthy_ratios: list[float] = []
                    walls: list[float] = []
                    for _ in range(args.repeat):
                        dd = dd_levels.get(length)
                        results, wall = asyncio.run(one_round(cfg, length, usual, args.reader, dd))
                        walls.append(wall)
                        by = {r.node: r for r in results}
                        v = by[victim]
                        caught += not v.passed
                        alarms += sum(not by[h].passed for h in healthy)
                        healthy_ratios += [
                            by[h].read_bw / by[h].usual_bw
                            for h in healthy
                            if by[h].read_bw and by[h].usual_bw
                        ]
                        if v.read_bw and v.usual_bw:
                            ratios.append(v.read_bw / v.usual_bw)
                    cell = {
                        "slowdown": slowdown,
                        "sentinel_s": length,
                        "detected": f"{caught}/{args.repeat}",
                        "false_alarms": f"{alarms}/{args.repeat * len(healthy)}",
                        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
                        "round_wall_s_median": round(statistics.median(walls), 3),
                        "healthy_ratio_min": round(min(healthy_ratios), 3)
                        if healthy_ratios
                        else None,
                    }
                    cells.append(cell)
                    print(json.dumps(cell), flush=True)
        finally:
            mc.down()
    doc = {
        "benchmark": "sentinel",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "screener": __version__,
        "cores": os.cpu_count(),
        "nodes": args.nodes,
        "pace_mb_s": None if args.unpaced else PACE_MB_S,
        "sentinel_drop": drop,
        "reader": args.reader,
        "repeat": args.repeat,
        "cells": cells,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    RESULTS.parent.mkdir(exist_ok=True)
    out = UNPACED if args.unpaced else DD if args.reader == "dd" else RESULTS
    out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
