"""The requeue gap (issue 44): from the PrologSlurmctld's `exit 1` to the requeued attempt's
prolog, on the emulated cluster, with the shipped slurm.conf and with SchedulerParameters
values that Slurm's source says shorten it (docs/slurm.md, "The requeue gap").

For each variant, --jobs jobs (3 by default), each on a fresh SQLite store: node01 reads at
1/15 of the 300 MB/s pace, a 3-node batch job opts in (`--comment screener=on`), its prolog
(through `screener hookd`, as docs/slurm.md recommends) probes node[01-03], drains node01 and
exits 1; Slurm requeues the job; screener's release helper sets StartTime=now; the requeued
attempt's prolog runs on three healthy nodes. Between jobs node01 is resumed and re-paced.

The gap is read from the hook log (millisecond stamps, UTC): the `job N: exit 1 so Slurm
requeues it` line to the requeued attempt's `screening` line. slurmctld's log (its stamps are
local time: UTC here) splits it: `Requeuing JobId=N` (batch_requeue_fini: after the failed
attempt's EpilogSlurmctld), `_slurm_rpc_update_job: complete JobId=N` (the release), `sched:
Allocate JobId=N` (the scheduling pass that starts it; `backfill: Started` if backfill did).
Any `credential revoked` / `non-startable` line of slurmctld's is counted (the hazard of a
short batch_sched_delay: docs/slurm.md).

A variant is a SchedulerParameters value ("shipped": no such line, Slurm's defaults); it is
written into the cluster's slurm.conf and applied with `scontrol reconfigure`, and each job
records what `scontrol show config` then said. Writes bench/results/requeue_gap.json.

    .venv/bin/python bench/requeue_gap.py [--jobs 3]
        [--variants shipped,batch_sched_delay=1,batch_sched_delay=0] [--out F]
    SCREENER_TEST_SLURM=24.11 .venv/bin/python bench/requeue_gap.py --out F   # a root's Slurm
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

from deploy.minicluster import ClusterHandle
from screener import __version__
from tests.hooked_cluster import (
    SLURM_UNDER_TEST,
    hooked_cluster,
    pace_devices,
    sbatch,
    sinfo_nodes,
    start_hookd,
    wait_for,
    wait_job,
    write_config,
)

RESULTS = Path(__file__).resolve().parent / "results" / "requeue_gap.json"
NODES = 6
ALLOC = 3
SLOW = "20M"  # 1/15 of PACE, as tests/test_prolog.py
SHIPPED = "shipped"
LINE_RE = re.compile(r"^(\S+) screener (\w+): (.*)$")
CTL_RE = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (.*)$")
HAZARD_RE = re.compile(r"credential revoked|non-startable", re.IGNORECASE)


def show_config(cluster: ClusterHandle, key: str) -> str:
    for line in cluster.slurm("scontrol", "show", "config").stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return ""


def set_sched_params(cluster: ClusterHandle, value: str | None) -> str:
    """SchedulerParameters=value in the cluster's slurm.conf (None: no such line), applied
    with `scontrol reconfigure`; what `scontrol show config` reports once it took effect."""
    conf = cluster.slurm_conf
    keep = conf.read_text().splitlines()
    lines = [ln for ln in keep if not ln.startswith("SchedulerParameters=")]
    if value:
        lines.append(f"SchedulerParameters={value}")
    conf.write_text("\n".join(lines) + "\n")
    cluster.slurm("scontrol", "reconfigure")
    want = value or "(null)"

    def applied() -> str | None:
        try:
            got = show_config(cluster, "SchedulerParameters")
        except Exception:  # a restarting slurmctld (24.11+ reconfigure restarts it)
            return None
        return got if got == want else None

    return wait_for(f"SchedulerParameters={want}", applied, 60)


def heal(cluster: ClusterHandle) -> None:
    """node01 back in service and every device at the pace; the cluster idle. (Not
    ClusterHandle.reset: its repair would write slurm.conf anew and drop the variant.)"""
    cluster.heal()
    pace_devices(cluster, list(cluster.nodes))
    drained = [
        n
        for n, rec in sinfo_nodes(cluster).items()
        if "DRAIN" in rec["state_flags"] or rec["state"] in ("drained", "draining")
    ]
    if drained:
        cluster.slurm("scontrol", "update", f"nodename={','.join(drained)}", "state=resume")

    def idle() -> bool:
        nodes = sinfo_nodes(cluster)
        return all(r["state"] == "idle" and not r["state_flags"] for r in nodes.values())

    wait_for("every node idle", idle, 120)


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def ctl_stamp(text: str) -> float:
    # slurmctld logs local time without a zone; this machine runs UTC (checked in main)
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def hook_events(log: str, job: str) -> dict[str, Any]:
    exits: list[float] = []
    screens: list[float] = []
    released: list[float] = []
    drained: list[str] = []
    for line in log.splitlines():
        m = LINE_RE.match(line)
        if not m:
            continue
        t, who, what = stamp(m.group(1)), m.group(2), m.group(3)
        if who == "prolog" and what.startswith(f"job {job}: exit 1 so Slurm requeues it"):
            exits.append(t)
        elif who == "prolog" and what.startswith(f"job {job} (") and ": screening" in what:
            screens.append(t)
        elif who == "prolog" and what.startswith("drained "):
            drained.append(what)
        elif who == "release" and what.startswith(f"job {job} released"):
            released.append(t)
    return {"exits": exits, "screens": screens, "released": released, "drained": drained}


def ctl_events(text: str, job: str, since: float) -> dict[str, Any]:
    out: dict[str, list[float]] = {"requeuing": [], "update_rpc": [], "allocate": []}
    how: list[str] = []
    hazards: list[str] = []
    jid = rf"JobId={job}\b"
    for line in text.splitlines():
        m = CTL_RE.match(line)
        if not m:
            continue
        t, what = ctl_stamp(m.group(1)), m.group(2)
        if t < since:
            continue
        if re.search(rf"Requeuing {jid}", what):
            out["requeuing"].append(t)
        elif re.search(rf"_slurm_rpc_update_job: complete {jid}", what):
            out["update_rpc"].append(t)
        elif re.search(rf"sched: Allocate {jid}", what):
            out["allocate"].append(t)
            how.append("sched")
        elif re.search(rf"Started {jid}", what):  # 22.05: sched/backfill: _start_job: Started
            out["allocate"].append(t)
            how.append("backfill")
        if HAZARD_RE.search(what):
            hazards.append(line)
    return {**out, "allocated_by": how, "hazards": hazards}


def after(times: list[float], t: float) -> float | None:
    later = [x for x in times if x >= t - 0.0005]
    return min(later) if later else None


def one_job(cluster: ClusterHandle, d: Path, variant: str, rep: int, params: str) -> dict[str, Any]:
    tag = f"{variant.replace('=', '').replace(',', '_')}-{rep}"
    out = d / tag
    out.mkdir()
    cfg = d / "screener.toml"
    log = out / "prolog.log"
    write_config(cfg, cluster, f"sqlite:///{out}/screener.db", log)
    heal(cluster)
    hookd = start_hookd(d / "hookd.sock")
    try:
        slow = cluster.nodes[0]  # select/linear allocates the lowest idle nodes first
        cluster.inject(slow, "slow_read", SLOW)
        script = out / "job.sh"
        script.write_text(f"#!/bin/sh\ndate +%s.%N > {out}/start\nsrun hostname > {out}/hosts\n")
        t0 = time.time()
        job_id = sbatch(cluster, "-N", str(ALLOC), "--comment", "screener=on", str(script))
        job = wait_job(cluster, job_id, timeout=300)
    finally:
        hookd.terminate()
        hookd.wait(30)
    text = log.read_text() if log.exists() else ""
    hook = hook_events(text, job_id)
    ctl_log = cluster.state_dir / "logs" / "slurmctld.log"
    ctl = ctl_events(ctl_log.read_text(errors="replace"), job_id, t0 - 1)
    exit_t = hook["exits"][0] if hook["exits"] else None
    second = hook["screens"][1] if len(hook["screens"]) > 1 else None

    def rel(t: float | None) -> float | None:
        return None if t is None or exit_t is None else round(t - exit_t, 3)

    requeued = after(ctl["requeuing"], exit_t) if exit_t else None
    release = hook["released"][0] if hook["released"] else None
    release_rpc = after(ctl["update_rpc"], exit_t) if exit_t else None
    realloc = after(ctl["allocate"], exit_t) if exit_t else None
    hosts = (out / "hosts").read_text().split() if (out / "hosts").exists() else []
    row = {
        "variant": variant,
        "rep": rep,
        "scheduler_parameters": params,
        "job": job_id,
        "state": job["job_state"],
        "restarts": job["restart_cnt"],
        "ran_on": sorted(hosts),
        "slow_node_kept_out": bool(hosts) and slow not in hosts,
        "gap_s": rel(second),
        "requeuing_after_exit_s": rel(requeued),
        "release_logged_after_exit_s": rel(release),
        "release_rpc_after_exit_s": rel(release_rpc),
        "allocate_after_exit_s": rel(realloc),
        "allocated_by": ctl["allocated_by"],
        "second_prolog_after_allocate_s": None
        if second is None or realloc is None
        else round(second - realloc, 3),
        "submit_to_start_s": round(float((out / "start").read_text()) - t0, 2)
        if (out / "start").exists()
        else None,
        "hazards": ctl["hazards"],
        "log": text.splitlines(),
    }
    print(
        f"{tag}: gap {row['gap_s']}s (requeuing {row['requeuing_after_exit_s']}, release "
        f"{row['release_rpc_after_exit_s']}, allocate {row['allocate_after_exit_s']} "
        f"{'/'.join(ctl['allocated_by'])}), {row['state']}, restarts {row['restarts']}, "
        f"ran on {','.join(row['ran_on'])}, hazards {len(row['hazards'])}",
        flush=True,
    )
    return row


def median(xs: list[float | None]) -> float | None:
    got = [x for x in xs if x is not None]
    return round(statistics.median(got), 3) if got else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=3, help="screened jobs per variant")
    ap.add_argument(
        "--variants",
        default=f"{SHIPPED},batch_sched_delay=1,batch_sched_delay=0",
        help="SchedulerParameters values separated by ';' or ',' between key=value items"
        f" ('{SHIPPED}': no SchedulerParameters line)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = ap.parse_args()
    # "a=1,b=2;c=3": two variants; "a=1,b=2": two too (one item each), unless ';' is used
    raw = args.variants
    variants = [v for v in (raw.split(";") if ";" in raw else raw.split(",")) if v]
    if time.localtime().tm_gmtoff != 0:
        raise SystemExit("slurmctld's log is read as UTC: run with TZ=UTC on a UTC machine")
    rows: list[dict[str, Any]] = []
    version = ""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cfg = d / "screener.toml"
        cfg.write_text("")
        for cluster in hooked_cluster(d, cfg, nodes=NODES, hookd=str(d / "hookd.sock")):
            version = cluster.slurm("scontrol", "--version").stdout.strip()
            print(f"{version}, {NODES} nodes, {args.jobs} jobs per variant", flush=True)
            for variant in variants:
                params = set_sched_params(cluster, None if variant == SHIPPED else variant)
                print(f"SchedulerParameters = {params}", flush=True)
                for rep in range(args.jobs):
                    rows.append(one_job(cluster, d, variant, rep, params))
            set_sched_params(cluster, None)
    summary: dict[str, Any] = {}
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant]
        summary[variant] = {
            "gap_s": [r["gap_s"] for r in mine],
            "gap_s_median": median([r["gap_s"] for r in mine]),
            "requeuing_after_exit_s_median": median([r["requeuing_after_exit_s"] for r in mine]),
            "release_rpc_after_exit_s_median": median(
                [r["release_rpc_after_exit_s"] for r in mine]
            ),
            "allocate_after_exit_s_median": median([r["allocate_after_exit_s"] for r in mine]),
            "second_prolog_after_allocate_s_median": median(
                [r["second_prolog_after_allocate_s"] for r in mine]
            ),
            "all_completed_off_the_slow_node": all(
                r["state"] == "COMPLETED" and r["slow_node_kept_out"] for r in mine
            ),
            "hazard_lines": sum(len(r["hazards"]) for r in mine),
        }
    doc = {
        "benchmark": "requeue_gap",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "screener": __version__,
        "slurm": version,
        "slurm_under_test": SLURM_UNDER_TEST or "host",
        "cores": os.cpu_count(),
        "cluster_nodes": NODES,
        "allocation": ALLOC,
        "slow_node": f"node01 read at {SLOW}B/s",
        "gap": "hook log: `exit 1 so Slurm requeues it` -> the requeued attempt's `screening`",
        "summary": summary,
        "rows": rows,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for variant, s in summary.items():
        print(
            f"{variant}: gap median {s['gap_s_median']}s {s['gap_s']}; requeuing "
            f"{s['requeuing_after_exit_s_median']}s, release "
            f"{s['release_rpc_after_exit_s_median']}s, allocate "
            f"{s['allocate_after_exit_s_median']}s after the exit; completed off the"
            f" slow node: {s['all_completed_off_the_slow_node']}; hazard lines {s['hazard_lines']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
