"""fio's fixed cost per invocation and per job (issue 22): what a short probe pays beyond
its configured ramp + runtime, with this machine's fio on a file of its own disk.

Cases: the sentinel's argv (one 0.1 s read), the triage's argv (two stonewalled read jobs,
``[prolog]`` defaults), each triage job alone, and one job with no ramp at several
runtimes; the wall of each (median of ``--repeat``) minus its configured seconds is the
floor. The emulated cluster adds SSH and shared cores on top; this is fio alone.
Writes bench/results/fio_floor.json.

    .venv/bin/python bench/fio_floor.py [--repeat 5] [--dir /var/tmp/screener-fio-floor]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from screener.policy import Policy
from screener.probe.fio import fio_argv, layout_argv, policy_jobs, probe_duration_s
from screener.probe.sentinel import sentinel_argv
from screener.probe.short import short_read_depth, triage_policy

RESULTS = Path(__file__).resolve().parent / "results" / "fio_floor.json"


def wall(argv: list[str]) -> float:
    """Seconds from exec to exit of one fio run (its output is discarded, its exit checked)."""
    t0 = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"fio failed ({res.returncode}): {res.stderr.strip()[:200]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/screener-fio-floor"))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    base = Policy()
    probe = dataclasses.replace(base.probe, target=str(args.dir), size_mib=256)
    pol = dataclasses.replace(base, probe=probe)
    tri = triage_policy(pol).probe
    sent = dataclasses.replace(probe, seq_iodepth=short_read_depth(pol))
    layout = subprocess.run(layout_argv(probe), capture_output=True, text=True, timeout=300)
    if layout.returncode != 0:
        raise SystemExit(f"layout failed: {layout.stderr.strip()[:200]}")
    sentinel_s = pol.prolog.sentinel_s
    cases: list[tuple[str, list[str], float]] = [
        ("sentinel", sentinel_argv(sent, sentinel_s), sentinel_s),
        ("triage", fio_argv(tri, policy_jobs(tri)), probe_duration_s(tri, policy_jobs(tri))),
    ]
    for job in policy_jobs(tri):
        cases.append((f"triage_{job}", fio_argv(tri, (job,)), probe_duration_s(tri, (job,))))
    for runtime in (0.1, 0.5, 1.0):
        one = dataclasses.replace(tri, ramp_s=0.0, runtime_s=runtime)
        cases.append((f"seq_read_{runtime:g}s_no_ramp", fio_argv(one, ("seq_read",)), runtime))
    rows: list[dict[str, Any]] = []
    for name, argv, configured in cases:
        walls = [wall(argv) for _ in range(args.repeat)]
        med = statistics.median(walls)
        row = {
            "case": name,
            "configured_s": round(configured, 3),
            "wall_s": [round(w, 3) for w in walls],
            "wall_median_s": round(med, 3),
            "floor_s": round(med - configured, 3),
        }
        rows.append(row)
        print(
            f"{name:28} configured {configured:5.2f}s  wall {med:5.2f}s  "
            f"floor {med - configured:.2f}s"
        )
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    shutil.rmtree(args.dir, ignore_errors=True)
    doc = {
        "benchmark": "fio_floor",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fio": version,
        "cores": os.cpu_count(),
        "target": str(args.dir),
        "repeat": args.repeat,
        "triage": {"ramp_s": tri.ramp_s, "runtime_s": tri.runtime_s, "jobs": policy_jobs(tri)},
        "rows": rows,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
