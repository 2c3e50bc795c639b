"""What a screened job pays before it starts (issue 22): submit -> start of an 8-node batch
job on a 10-node emulated cluster whose slurmctld runs screener's PrologSlurmctld, with
the shipped probe durations (1 s ramp + 3 s per fio job; a 512 MiB region, as the emulated
/scratch holds 1 GiB), with the shipped policy ("default": triage and decisive_ratio as
shipped) or triage forced off or on.

Cases, each with a new SQLite store (no fresh verdicts: every prolog probes):
- healthy: every node healthy; the job starts after one prolog.
- slow: node01 reads at 1/20 of the 300 MB/s pace; the prolog drains it, Slurm requeues
  the job, the second prolog lets the 7 fresh nodes in (sentinel) and probes node09.

A "+rolling" mode first runs one rolling sweep over the 10 healthy idle nodes (`screener
sweep --submit --rolling --wait`, rolling_nodes 10: what the rolling timer keeps true), so
every node is fresh when the job is submitted; in the slow case node01 turns slow after
it (its sentinel catches it). The rolling job's own wall is reported apart, not counted.
After it, DD_READINGS_MIN healthy jobs on every node let each node's sentinel learn its dd
level (fio sentinels with a dd reading beside, as a site's first fast paths after a node's
readings age out); their prolog walls are reported apart ("learning_prolog_walls_s").
A "+history" mode first stores every node's full-probe baseline of two hours ago (as a
site's sweeps leave it): no verdict is fresh, so every prolog probes, but the triage has
history to compare with besides the peers.

Devices are paced at 300 MB/s (tests/hooked_cluster.PACE) so the device, not the 2 shared
cores, sets each node's rate. The probe files are laid out once before the first case
(a site pays that once per node). Writes bench/results/time_to_start.json.

    .venv/bin/python bench/time_to_start.py [--repeat 2]
        [--modes default,default+history,default+rolling,off,on,on+write,on+norand,on+confirmall,
                 on+decisive,on+rolling,on:1M]
        [--size-mib 512] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.minicluster import ClusterHandle
from screener import __version__
from screener.hostlist import fold_nodes
from screener.prolog.sentinel import DD_READINGS_MIN
from tests.hooked_cluster import (
    PACE,
    REPO,
    SCREENER,
    hooked_cluster,
    pace_devices,
    run_screener,
    sbatch,
    seen_by_the_sweep,
    start_hookd,
    wait_job,
    write_config,
)

RESULTS = Path(__file__).resolve().parent / "results" / "time_to_start.json"
NODES = 10
ALLOC = 8
SLOW = "15M"  # 1/20 of PACE
# The shipped recipe's durations; the region is half of it: the emulated /scratch is 1 GiB.
PROBE: dict[str, float] = {"size_mib": 512, "runtime_s": 3.0, "ramp_s": 1.0}
WALL_RE = re.compile(r"job (\d+): may start \(([0-9.]+)s\)")


def config(
    cluster: ClusterHandle,
    cfg: Path,
    db: str,
    log: Path,
    triage: bool | None,
    seq_bs: str | None = None,
    write: bool = False,
    rand: bool = True,
    confirm_all: bool = False,
    decisive: bool | None = False,
    seq_iodepth: int | None = None,
) -> None:
    """The bench's policy; ``seq_bs`` sets [prolog] triage_seq_bs (None: its default),
    ``write`` [prolog] triage_write, ``rand`` triage_rand_read, ``confirm_all`` [verdict]
    confirm_every_job (the re-probe runs the whole recipe, as before 2026-11-26 04:30),
    ``decisive`` [verdict] decisive_ratio = 0.1 (a clear slow reader decided in round 1);
    ``triage`` or ``decisive`` None: the shipped default (mode "default"); ``seq_iodepth``
    [prolog] seq_iodepth (None: its default)."""
    prolog: dict[str, Any] = {"budget_s": 120.0, "triage_write": write}
    if triage is not None:
        prolog["triage"] = triage
    prolog["triage_rand_read"] = rand
    verdict: dict[str, Any] = {"confirm_every_job": confirm_all}
    if decisive is not None:
        verdict["decisive_ratio"] = 0.1 if decisive else 0.0
    if seq_bs is not None:
        prolog["triage_seq_bs"] = seq_bs
    if seq_iodepth is not None:
        prolog["seq_iodepth"] = seq_iodepth
    write_config(
        cfg,
        cluster,
        db,
        log,
        probe=PROBE,
        prolog=prolog,
        transport={"command_timeout_s": 120.0},
        verdict=verdict,
        sweep={"rolling_nodes": NODES},  # +rolling: one rolling job makes every node fresh
    )


def script(out: Path) -> Path:
    path = out / "job.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'date +%s.%N > {out}/start-"$SLURM_JOB_ID"\n'
        f'srun hostname > {out}/hosts-"$SLURM_JOB_ID"\n'
    )
    return path


def learning(cluster: ClusterHandle, out: Path, log: Path) -> list[float]:
    """DD_READINGS_MIN healthy jobs over every node (the nodes learn their dd level); each
    one's prolog wall."""
    walls: list[float] = []
    for _ in range(DD_READINGS_MIN):
        n = str(len(cluster.nodes))
        job_id = sbatch(cluster, "-N", n, "--comment", "screener=on", str(script(out)))
        wait_job(cluster, job_id, timeout=300)
        text = log.read_text() if log.exists() else ""
        walls += [float(w) for j, w in WALL_RE.findall(text) if j == job_id]
    return walls


def rolling(cluster: ClusterHandle, cfg: Path, out: Path) -> float:
    """One rolling sweep over every idle node (all healthy); its wall (submit -> end)."""
    t0 = time.monotonic()
    res = run_screener(
        cluster, cfg, "sweep", "--submit", "--wait", "--rolling",
        "--script", str(REPO / "jobs" / "sweep.sbatch"), cwd=out,
    )  # fmt: skip
    logs = "".join(p.read_text() for p in sorted(out.glob("slurm-*.out")))
    if res.returncode != 0 or f"holds {fold_nodes(cluster.nodes)}" not in logs:
        raise SystemExit(f"the rolling sweep did not hold every node: {res.stderr}{logs}")
    return round(time.monotonic() - t0, 1)


def case(
    cluster: ClusterHandle, d: Path, name: str, mode: str, rep: int, slow: bool
) -> dict[str, Any]:
    """One screened job: submit -> start, prolog walls, where it ran. ``mode``: off, on, or
    on:BS (triage with [prolog] triage_seq_bs = BS); a "+write" suffix turns triage_write
    on, "+norand" triage_rand_read off, "+confirmall" confirm_every_job on, "+decisive"
    decisive_ratio 0.1, "+qdN" [prolog] seq_iodepth N; "default": triage and decisive_ratio
    as shipped; "+hookd" every hook of the case through `screener hookd`."""
    base, *plus = mode.split("+")
    depths = [int(p[2:]) for p in plus if p.startswith("qd")]
    triage, _, seq_bs = base.partition(":")
    tag = f"{name}-{mode.replace(':', '-').replace('+', '-')}-{rep}"
    out = d / tag
    out.mkdir()
    cfg = d / "screener.toml"
    log = out / "prolog.log"
    db = f"sqlite:///{out}/screener.db"
    shipped = triage == "default"
    config(
        cluster,
        cfg,
        db,
        log,
        None if shipped else triage == "on",
        seq_bs or None,
        "write" in plus,
        "norand" not in plus,
        "confirmall" in plus,
        None if shipped and "decisive" not in plus else "decisive" in plus,
        depths[0] if depths else None,
    )
    cluster.reset()
    pace_devices(cluster, list(cluster.nodes))
    # The wrapper names d/hookd.sock: with no server there, each hook runs in its own
    # process (and logs that hookd was not used). The rolling sweep's hooks use it too.
    hookd = start_hookd(d / "hookd.sock") if "hookd" in plus else None
    try:
        if "history" in plus:
            seen_by_the_sweep(cluster, cfg, db)  # +history: as a site's sweeps leave it
        rolled = rolling(cluster, cfg, out) if "rolling" in plus else None
        learned = learning(cluster, out, log) if "rolling" in plus else None
        if slow:
            cluster.inject(cluster.nodes[0], "slow_read", SLOW)
        t0 = time.time()
        job_id = sbatch(cluster, "-N", str(ALLOC), "--comment", "screener=on", str(script(out)))
        job = wait_job(cluster, job_id, timeout=600)
    finally:
        if hookd is not None:
            hookd.terminate()
            hookd.wait(30)
    started = float((out / f"start-{job_id}").read_text())
    text = log.read_text() if log.exists() else ""
    walls = [float(w) for j, w in WALL_RE.findall(text) if j == job_id]
    row = {
        "case": name,
        "triage": mode,
        "rep": rep,
        "job": job_id,
        "state": job["job_state"],
        "restarts": job["restart_cnt"],
        "submit_to_start_s": round(started - t0, 1),
        "last_prolog_wall_s": walls[-1] if walls else None,
        "ran_on": sorted((out / f"hosts-{job_id}").read_text().split()),
        "escalated": "after the triage, beside" in text,
        "rolling_wall_s": rolled,
        "learning_prolog_walls_s": learned,
        "hookd": hookd is not None and "hookd not used" not in text,
        "log": text.splitlines(),
    }
    print(
        f"{tag}: submit->start {row['submit_to_start_s']}s, restarts {row['restarts']}, "
        f"last prolog {row['last_prolog_wall_s']}s, slow node in job: "
        f"{cluster.nodes[0] in row['ran_on']}",
        flush=True,
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument(
        "--modes",
        default="default,default+history,default+rolling",
        help="triage modes to run: default (triage and decisive_ratio as shipped), off, on,"
        " on:BS (triage_seq_bs = BS, e.g. on:1M); a"
        " +write suffix turns triage_write on (on+write), +norand triage_rand_read off,"
        " +confirmall verdict.confirm_every_job on, +decisive verdict.decisive_ratio 0.1,"
        " +rolling one rolling sweep over every node first (all fresh), +history every"
        " node's full-probe baseline of 2 h ago (history, none fresh), +qdN [prolog]"
        " seq_iodepth N (the sentinel's and the triage's sequential queue depth), +hookd"
        " every hook through `screener hookd`",
    )
    ap.add_argument("--size-mib", type=int, default=PROBE["size_mib"], help="probe region")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = ap.parse_args()
    PROBE["size_mib"] = args.size_mib
    modes = [m for m in args.modes.split(",") if m]
    if any(
        m.split("+")[0].partition(":")[0] not in ("default", "off", "on")
        or not {p for p in m.split("+")[1:] if not re.fullmatch(r"qd[1-9][0-9]*", p)}
        <= {"write", "norand", "confirmall", "decisive", "rolling", "history", "hookd"}
        for m in modes
    ):
        raise SystemExit(
            "--modes: default, off, on or on:BS"
            " (+write, +norand, +confirmall, +decisive, +rolling, +history, +qdN, +hookd),"
            f" not {args.modes!r}"
        )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cfg = d / "screener.toml"
        cfg.write_text("")
        for cluster in hooked_cluster(d, cfg, nodes=NODES, hookd=str(d / "hookd.sock")):
            # lay the probe files out once (a site pays that once per node)
            config(cluster, cfg, f"sqlite:///{d}/layout.db", d / "layout.log", False)
            env = {**cluster.env(), "SCREENER_CONFIG": str(cfg)}
            t0 = time.monotonic()
            res = subprocess.run(
                [str(SCREENER), "screen", ",".join(cluster.nodes), "--json"],
                env=env, capture_output=True, text=True, timeout=1800, check=False,
            )  # fmt: skip
            print(f"layout + first screen: {time.monotonic() - t0:.0f}s", flush=True)
            got = {n["node"]: n for n in json.loads(res.stdout or '{"nodes": []}')["nodes"]}
            if len(got) != NODES or any(n["status"] == "UNKNOWN" for n in got.values()):
                # a recipe the nodes cannot run would measure nothing
                raise SystemExit(f"the layout screen did not pass: {res.stdout[-1500:]}")
            for n in got.values():  # noise on this unpaced screen costs the bench nothing
                if n["status"] != "OK":
                    print(f"layout screen: {n['node']} {n['status']} {n['reason']}", flush=True)
            for rep in range(args.repeat):
                for mode in modes:
                    for name, slow in (("healthy", False), ("slow", True)):
                        rows.append(case(cluster, d, name, mode, rep, slow))
    summary: dict[str, Any] = {}
    for name in ("healthy", "slow"):
        for mode in modes:
            mine = [r for r in rows if r["case"] == name and r["triage"] == mode]
            key = f"{name}_triage_{mode.replace(':', '_').replace('+', '_')}"
            starts = [r["submit_to_start_s"] for r in mine]
            summary[key] = {
                "submit_to_start_s_median": statistics.median(starts),
                "runs": starts,
                "last_prolog_wall_s": [r["last_prolog_wall_s"] for r in mine],
                "rolling_wall_s": [r["rolling_wall_s"] for r in mine],
                "slow_node_kept_out": all("node01" not in r["ran_on"] for r in mine)
                if name == "slow"
                else None,
            }
    doc = {
        "benchmark": "time_to_start",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "screener": __version__,
        "cores": os.cpu_count(),
        "cluster_nodes": NODES,
        "allocation": ALLOC,
        "probe": PROBE,
        "triage": "0.25 s ramp + 0.5 s per fio job ([prolog] defaults); on = triage_seq_bs"
        " default, on:BS = that block size; the reads only, +write = triage_write on,"
        " +norand = triage_rand_read off",
        "devices_paced": PACE,
        "slow_node": f"node01 read at {SLOW}B/s",
        "summary": summary,
        "rows": rows,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for key, s in summary.items():
        print(f"{key}: submit->start median {s['submit_to_start_s_median']}s {s['runs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
