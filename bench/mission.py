"""The mission end to end: does screening keep one slow reader from dragging a job down?

On a 10-node emulated cluster (real Slurm, screener's PrologSlurmctld/EpilogSlurmctld), an
IOR-shaped 8-node batch job: each task writes then reads back its own file on its node's
/scratch with fio (direct I/O; IOR is not installable here), the read phase synchronous —
the job's read bandwidth is total bytes / the slowest task's read time. Three runs:

  (a) all nodes healthy, no screening;
  (b) node01 reads at 20 MB/s (blkio throttle), no screening (job not opted in);
  (c) same slow node, job opted in: the prolog drains node01 and Slurm requeues the job.

Target: (c) >= 0.8 x (a) in one run. Writes bench/results/mission.json.

    .venv/bin/python bench/mission.py [--mib 512]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.minicluster import ClusterHandle
from screener import __version__
from tests.hooked_cluster import hooked_cluster, sbatch, wait_job, write_config

RESULTS = Path(__file__).resolve().parent / "results" / "mission.json"
SLOW = "20M"


def job_script(out: Path, mib: int) -> str:
    """Write phase, then a synchronous read phase, one fio per node, JSON per node."""
    fio = (
        "fio --name=ior --filename=/scratch/ior.dat --bs=1M --direct=1 --ioengine=libaio"
        f" --iodepth=16 --size={mib}M --output-format=json"
    )
    srun = "srun --ntasks-per-node=1"
    return (
        "#!/bin/sh\n"
        f"{srun} -o {out}/write-%j-%N.json {fio} --rw=write\n"
        f"{srun} -o {out}/read-%j-%N.json {fio} --rw=read\n"
    )


def read_figures(out: Path, job_id: str) -> dict[str, Any]:
    """Per node read seconds and bytes, and the job's synchronous read bandwidth."""
    per: dict[str, dict[str, float]] = {}
    for f in sorted(out.glob(f"read-{job_id}-*.json")):
        node = f.stem.split("-", 2)[2]
        job = json.loads(f.read_text())["jobs"][0]["read"]
        per[node] = {"bytes": job["io_bytes"], "s": job["runtime"] / 1000.0}
    total = sum(v["bytes"] for v in per.values())
    slowest = max(v["s"] for v in per.values())
    return {
        "nodes": sorted(per),
        "per_node_read_mb_s": {n: round(v["bytes"] / v["s"] / 1e6, 1) for n, v in per.items()},
        "slowest_task_s": round(slowest, 3),
        "job_read_mb_s": round(total / slowest / 1e6, 1),
    }


def scenario(
    cluster: ClusterHandle, out: Path, script: Path, name: str, opt_in: bool
) -> dict[str, Any]:
    t0 = time.monotonic()
    args = ["-N", "8", "-o", str(out / f"job-{name}-%j.txt")]
    if opt_in:
        args += ["--comment", "screener=on"]
    job_id = sbatch(cluster, *args, str(script))
    job = wait_job(cluster, job_id, timeout=900)
    wall = time.monotonic() - t0
    fig = read_figures(out, job_id)
    fig.update(
        scenario=name,
        job_id=job_id,
        state=job["job_state"],
        restarts=job["restart_cnt"],
        submit_to_end_s=round(wall, 1),
    )
    print(json.dumps(fig), flush=True)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=512, help="file per task (MiB)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        config = d / "screener.toml"
        config.write_text("")
        for cluster in hooked_cluster(d, config, nodes=10):
            # 8 probes at QD32 on this shared 2-core machine: healthy emulated nodes showed up
            # to 67% of reads >= 100 ms (CPU starvation, not the device), which made the
            # slow-I/O rule call a shared cause. The bench leaves the decision to the peer and
            # write/read rules (the slow node reads 0.04x its peers, W/R ~12x and more).
            write_config(
                config,
                cluster,
                f"sqlite:///{d}/screener.db",
                d / "prolog.log",
                verdict={"max_slow_fraction": 0.99},
            )
            script = d / "ior.sh"
            script.write_text(job_script(d, args.mib))
            a = scenario(cluster, d, script, "a_healthy", opt_in=False)
            slow = cluster.nodes[0]  # select/linear gives the lowest idle nodes first
            cluster.inject(slow, "slow_read", SLOW)
            b = scenario(cluster, d, script, "b_slow_unscreened", opt_in=False)
            c = scenario(cluster, d, script, "c_slow_screened", opt_in=True)
            log = (d / "prolog.log").read_text()
            drained = [ln for ln in log.splitlines() if "drained " in ln]
            hook_log = [
                ln[26:]
                for ln in log.splitlines()
                if f"job {c['job_id']}" in ln or ": " in ln[26:60]
            ]
    ratio = c["job_read_mb_s"] / a["job_read_mb_s"]
    doc = {
        "benchmark": "mission",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "screener": __version__,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "job": f"8 nodes x fio write then read {args.mib} MiB, 1 MiB, QD16, direct",
        "slow_node": f"node01 read throttled to {SLOW}B/s",
        "policy_note": "verdict.max_slow_fraction = 0.99 (CPU-starved healthy nodes, see code)",
        "scenarios": [a, b, c],
        "c_over_a": round(ratio, 3),
        "b_over_a": round(b["job_read_mb_s"] / a["job_read_mb_s"], 3),
        "target_c_over_a": 0.8,
        "met": ratio >= 0.8,
        "prolog_drained": drained,
        "hook_log": hook_log,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"(c)/(a) = {ratio:.2f}  (b)/(a) = {doc['b_over_a']}  target >= 0.8: {doc['met']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
