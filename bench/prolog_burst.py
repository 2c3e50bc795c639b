"""Prolog wall under a burst of job starts (issue 27): B one-node screened jobs submitted at
once to an 8-node emulated cluster whose slurmctld runs jobs/prolog-slurmctld, with every
prolog probing (`fresh_s = 0`) and then on the fast path (every node passed just before).

Per burst: each prolog's wall as the hook logs it (`job N: may start (X s)`), that every
job completed, and that no run or verdict was lost (one stored prolog run with a verdict
per node per hook run). Devices are paced (tests/hooked_cluster.PACE) so the 2 shared cores
do not decide who looks slow. Writes bench/results/prolog_burst.json.

    .venv/bin/python bench/prolog_burst.py [--bursts 8,32]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from screener import __version__
from screener.store import open_store
from tests.hooked_cluster import (
    hooked_cluster,
    pace_devices,
    run_screener,
    sbatch,
    wait_job,
    write_config,
)

RESULTS = Path(__file__).resolve().parent / "results" / "prolog_burst.json"
NODES = 8
WALL = re.compile(r"job (\d+): may start \(([\d.]+)s\)")


def burst(cluster: Any, cfg: Path, log: Path, db: str, out: Path, size: int) -> dict[str, Any]:
    """Submit ``size`` 1-node screened jobs at once; their prolog walls and completeness."""
    log.write_text("")
    t0 = time.monotonic()
    jobs = [
        sbatch(
            cluster,
            "-N",
            "1",
            "-o",
            str(out / "j-%j.out"),
            "--comment",
            "screener=on",
            "--wrap",
            "srun hostname",
        )
        for _ in range(size)
    ]
    states = [wait_job(cluster, j, timeout=900)["job_state"] for j in jobs]
    span = time.monotonic() - t0
    walls = {j: float(s) for j, s in WALL.findall(log.read_text()) if j in jobs}
    with open_store(db) as store:
        runs = [
            r
            for r in store.latest_runs(10 * size)
            if r.job_id in jobs and r.trigger.value == "prolog"  # not the epilog's iostat runs
        ]
        verdicts = sum(len(store.run_verdicts(r.id)) for r in runs)
    w = sorted(walls.values())
    return {
        "jobs": size,
        "completed": states.count("COMPLETED"),
        "prolog_walls_logged": len(w),
        "prolog_runs_stored": len(runs),
        "verdicts_stored": verdicts,
        "wall_median_s": round(statistics.median(w), 2) if w else None,
        "wall_max_s": round(w[-1], 2) if w else None,
        "submit_to_last_done_s": round(span, 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", default="8,32", help="comma-separated burst sizes")
    args = ap.parse_args()
    sizes = [int(s) for s in args.bursts.split(",")]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cfg, log, db = d / "screener.toml", d / "prolog.log", f"sqlite:///{tmp}/screener.db"
        cfg.write_text("")
        for cluster in hooked_cluster(d, cfg, nodes=NODES):
            pace_devices(cluster, list(cluster.nodes))
            for mode, fresh in (("probe", 0.0), ("fast_path", 3600.0)):
                write_config(cfg, cluster, db, log, prolog={"fresh_s": fresh})
                for size in sizes:
                    if mode == "fast_path":  # every node passed just before the burst
                        base = run_screener(cluster, cfg, "screen", ",".join(cluster.nodes))
                        assert base.returncode == 0, base.stderr
                    got = {"mode": mode, **burst(cluster, cfg, log, db, d, size)}
                    print(json.dumps(got), flush=True)
                    results.append(got)
    doc = {
        "benchmark": "prolog_burst",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "screener": __version__,
        "cores": os.cpu_count(),
        "cluster_nodes": NODES,
        "probe": "3 fio jobs x (0.5 s ramp + 1.5 s), 64 MiB region, QD32, direct=1, paced 300M",
        "bursts": results,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
