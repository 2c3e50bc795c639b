"""What a screened job pays before it starts (issue 22): submit -> start of an 8-node batch
job on a 10-node emulated cluster whose slurmctld runs screener's PrologSlurmctld, with
the shipped probe durations (1 s ramp + 3 s per fio job; a 512 MiB region, as the emulated
/scratch holds 1 GiB), with the shipped policy ("default": triage and decisive_ratio as
shipped) or triage forced off or on.

Cases (``--cases``), each with a new SQLite store (no fresh verdicts: every prolog probes):
- healthy: every node healthy; the job starts after one prolog.
- slow: node01 reads at 1/20 of the fleet's healthy rate; the prolog drains it, Slurm
  requeues the job, the second prolog lets the 7 fresh nodes in (sentinel) and probes node09.

Fleets (``--fleet``, all by default, each case and mode run on each in turn, so their
ratios come from one run):
- paced: every device paced at 300 MB/s and 20,000 read IOPS (tests/hooked_cluster.PACE,
  PACE_IOPS) so the device, not the 2 shared cores, sets each node's rate; the slow node
  reads at 15 MB/s.
- mixed (issue 44): unpaced devices (healthy nodes spread with the cores' contention), and
  node05 and node07, a slower drive model, read and write at 0.6x of the unpaced healthy
  median (measured before each case by two calibration screens of the 8 nodes the job gets,
  with the bench's full recipe, which judges drains; unpaced rates follow the machine's
  load), then of the others' median in a third screen with the two throttled (they hand
  their share of the cores to the others);
  the slow node reads at 1/20 of that median.
- paced_mixed: the paced fleet with node05 and node07 at 0.6x the pace: a mixed partition
  without the unpaced fleet's emulation artifacts (a blkio-throttled node's slices read as
  stalls and latency tails beside unthrottled peers; unpaced peers read faster when fewer
  nodes share the 2 cores, as in a confirmation round).
With the mixed fleet the cluster comes up unpaced and the paced fleet is set by throttles
(the same blkio limits `up --pace` sets); with the paced fleet alone it comes up paced.

A "+rolling" mode first runs one rolling sweep over the 10 healthy idle nodes (`screener
sweep --submit --rolling --wait`, rolling_nodes 10: what the rolling timer keeps true), so
every node is fresh when the job is submitted; in the slow case node01 turns slow after
it (its sentinel catches it). The rolling job's own wall is reported apart, not counted.
After it, DD_READINGS_MIN healthy jobs on every node let each node's sentinel learn its dd
level (fio sentinels with a dd reading beside, as a site's first fast paths after a node's
readings age out); their prolog walls are reported apart ("learning_prolog_walls_s").
A "+history" mode first stores every node's full-probe baseline of two hours ago, three
times (rules.MIN_HISTORY: a node's usual place among its peers counts from three), as a
site's sweeps leave it: no verdict is fresh, so every prolog probes, but the triage has
history to compare with besides the peers.

A "+sweep" mode (with +history) then runs one real nightly sweep over the 10 idle nodes
(`screener sweep --submit --wait`: its full probe, then its learning reads of the triage's
recipe, sweep/learn.py) and moves the store 2 h back: what a site's sweeps leave, the
triage's own history included, none fresh. Its wall is reported apart ("nightly_sweep_wall_s").

A "+learned" mode (with +history) then runs DD_READINGS_MIN healthy jobs over every node,
moving the store 2 h back before each and after the last (none is fresh, so each triages):
a site's earlier screened jobs, hours apart, from which the triage learns
each node's place and tail under its own recipe (a slower model pays the full probe in
those, verdict/usual.py), none fresh; their walls are reported apart as for +rolling.

In the mixed fleet "+history" stores each node's baseline at its own rate (what the
calibration's full probe read it at; node05 and node07 at their throttle); in the paced
fleet at 300 MB/s.

Per fleet, mode and case: submit -> batch script start, every prolog wall of the job, and
how many healthy nodes the job's prologs probed in full (hook log lines `full probe of
NODES after the triage` or `after the second look`, the slow node not counted), and the
nodes drained. A job that drains can no longer start (fewer than 8 nodes left undrained:
healthy nodes, such as the mixed fleet's 0.6x pair, taken for slow) is cancelled and
reported as never started (submit_to_start_s null) rather than waited on. The probe
files are laid out once before the first case (a site pays that once per node). Writes
bench/results/time_to_start.json (per fleet under "fleets") and prints the fleets side by
side.

    .venv/bin/python bench/time_to_start.py [--repeat 2]
        [--modes default,default+history,default+rolling,off,on,on+write,on+norand,on+confirmall,
                 on+decisive,on+rolling,on:1M]
        [--cases healthy,slow] [--fleet paced,mixed] [--size-mib 512] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy.minicluster import ClusterHandle
from screener import __version__
from screener.hostlist import expand_nodeset, fold_nodes
from screener.policy import SweepPolicy
from screener.prolog.sentinel import DD_READINGS_MIN
from tests.hooked_cluster import (
    ACTIVE,
    PACE,
    PACE_IOPS,
    REPO,
    SCREENER,
    hooked_cluster,
    job_state,
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
CASES = ("healthy", "slow")
FLEETS = ("paced", "mixed", "paced_mixed")
# the mixed fleet's slower drive model: two healthy nodes, never the slow node01, both in
# the first allocation (node[01-08]) and the requeued one (node[02-09])
SLOWER = ("node05", "node07")
SLOWER_FACTOR = 0.6
SWEEPS_SEEN = 3  # +history: the sweeps that saw every node (rules.MIN_HISTORY)
CALIBRATIONS = 2  # the mixed fleet's calibration screens (their reads pooled)
# The shipped recipe's durations; the region is half of it: the emulated /scratch is 1 GiB.
PROBE: dict[str, float] = {"size_mib": 512, "runtime_s": 3.0, "ramp_s": 1.0}
WALL_RE = re.compile(r"job (\d+): may start \(([0-9.]+)s\)")
JOB_RE = re.compile(r"screener prolog: job (\d+)\b")
FULL_RE = re.compile(r"full probe of (\S+) after the (triage|second look)\b")


@dataclass
class Fleet:
    """One fleet: the throttles set on top of the cluster after each reset, the slow case's
    read rate for node01, and +history's baseline per node (MB/s; None: seen_by_the_sweep's
    300 MB/s for every node)."""

    name: str
    throttles: dict[str, dict[str, int | str]]
    slow: int | str
    history_mb_s: dict[str, float] | None = None
    about: dict[str, Any] = field(default_factory=dict)

    def apply(self, cluster: ClusterHandle) -> None:
        for node, kinds in self.throttles.items():
            for kind, value in kinds.items():
                cluster.inject(node, kind, value)


def paced_fleet(cluster: ClusterHandle) -> Fleet:
    """Every device at PACE (reads and writes) and PACE_IOPS (4k reads), as `up --pace`."""
    every: dict[str, int | str] = {
        "slow_read": PACE,
        "slow_write": PACE,
        "slow_randread": PACE_IOPS,
    }
    return Fleet(
        "paced",
        {n: dict(every) for n in cluster.nodes},
        SLOW,
        about={"devices_paced": PACE, "pace_iops": PACE_IOPS, "slow_node_read": f"{SLOW}B/s"},
    )


def paced_mixed_fleet(cluster: ClusterHandle) -> Fleet:
    """The paced fleet with node05 and node07 at SLOWER_FACTOR x the pace: a mixed partition
    without the unpaced fleet's two emulation artifacts (a throttled node's blkio slices
    read as stalls and tails beside unthrottled peers, and unpaced peers read faster when
    fewer nodes share the 2 cores, as in a confirmation round), so what is left is the
    rules' own behaviour on a fleet whose healthy nodes are not alike."""
    fleet = paced_fleet(cluster)
    rate = int(float(PACE.rstrip("M")) * 1e6 * SLOWER_FACTOR)
    slower = {"slow_read": rate, "slow_write": rate, "slow_randread": PACE_IOPS}
    pace_mb = float(PACE.rstrip("M"))
    return Fleet(
        "paced_mixed",
        {n: dict(slower) if n in SLOWER else dict(t) for n, t in fleet.throttles.items()},
        SLOW,
        {n: pace_mb * (SLOWER_FACTOR if n in SLOWER else 1.0) for n in cluster.nodes},
        about={**fleet.about, "slower_nodes": {n: f"{rate}B/s" for n in SLOWER}},
    )


def calibration_screen(cluster: ClusterHandle, cfg: Path, nodes: list[str]) -> list[Any]:
    """One `screener screen NODES --json` under ``cfg``: each node's row, every one with its
    read and write figure (MB/s), or SystemExit with the screen's output (a mixed fleet's
    calibration: the unpaced rates its slower model is set from; trend_lead's too)."""
    env = {**cluster.env(), "SCREENER_CONFIG": str(cfg)}
    res = subprocess.run(
        [str(SCREENER), "screen", ",".join(nodes), "--json"],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    rows = json.loads(res.stdout or '{"nodes": []}')["nodes"]
    got = [n for n in rows if n.get("read_mb_s") and n.get("write_mb_s")]
    if len(got) != len(nodes):
        raise SystemExit(f"the calibration screen did not pass: {res.stdout[-1500:]}")
    return got


def mixed_fleet(cluster: ClusterHandle, cfg: Path, d: Path) -> Fleet:
    """Unpaced devices, SLOWER at SLOWER_FACTOR x the unpaced healthy median, measured as the
    prolog's triage reads (0.25 s ramp + 0.5 s, the triage's queue depth; the write beside
    it) by CALIBRATIONS screens of the ALLOC nodes the job gets, every device unpaced.
    Called before each case. (Unpaced, a node's rate depends on the recipe, on how many nodes
    read at once and on the machine's load: 2026-11-28 at load 4-13, a calibration by the
    full recipe once after the layout measured 1,033 MB/s where the triage then saw peers at
    ~1,800 MB/s (the "0.6x" nodes at 0.34x); this one 800 where the first prolog's full
    probe saw 1,103 (0.44x).)"""
    cluster.reset()  # unpaced: nothing throttled
    reads: list[float] = []
    writes: list[float] = []
    per_node: dict[str, list[float]] = {}
    for k in range(CALIBRATIONS):
        config(
            cluster,
            cfg,
            f"sqlite:///{d}/calibration-{k}.db",
            d / "calibration.log",
            False,
        )  # fmt: skip: the full recipe, which judges drains (and a sweep's history)
        for n in calibration_screen(cluster, cfg, cluster.nodes[:ALLOC]):
            per_node.setdefault(n["node"], []).append(n["read_mb_s"])
            reads.append(n["read_mb_s"])
            writes.append(n["write_mb_s"])
    read, write = statistics.median(reads), statistics.median(writes)
    r, w = int(read * SLOWER_FACTOR * 1e6), int(write * SLOWER_FACTOR * 1e6)
    slow = int(read * 1e6 / 20)
    # 0.6x *of the rest*, as measured with the slower model throttled: unpaced, throttling
    # it hands its share of the 2 cores to the others (bench/repeatability.py, 2026-12-03:
    # a pair set at 0.6x of the unthrottled 997 MB/s read 0.41-0.46x in 8-node rounds)
    for n in SLOWER:
        cluster.inject(n, "slow_read", r)
        cluster.inject(n, "slow_write", w)
    config(cluster, cfg, f"sqlite:///{d}/calibration-slower.db", d / "calibration.log", False)
    rest = [
        n
        for n in calibration_screen(cluster, cfg, cluster.nodes[:ALLOC])
        if n["node"] not in SLOWER
    ]
    unthrottled = round(read)
    read = statistics.median(n["read_mb_s"] for n in rest)
    write = statistics.median(n["write_mb_s"] for n in rest)
    r, w = int(read * SLOWER_FACTOR * 1e6), int(write * SLOWER_FACTOR * 1e6)
    cluster.reset()
    print(
        f"mixed fleet: unpaced healthy median read {unthrottled:,} MB/s all unthrottled,"
        f" {read:,.0f} MB/s (write {write:,.0f}) beside the slower model;"
        f" {', '.join(SLOWER)} at {SLOWER_FACTOR}x ({r / 1e6:,.0f} / {w / 1e6:,.0f} MB/s),"
        f" the slow node reads {slow / 1e6:,.0f} MB/s",
        flush=True,
    )
    return Fleet(
        "mixed",
        {n: {"slow_read": r, "slow_write": w} for n in SLOWER},
        slow,
        # +history: each node where the calibration's full probe read it (the slower ones at
        # their throttle), as a site's sweeps leave it
        {
            n: round(r / 1e6 if n in SLOWER else statistics.median(per_node.get(n) or [read]), 1)
            for n in cluster.nodes
        },
        about={
            "devices_paced": None,
            "calibration": {
                "nodes": fold_nodes(cluster.nodes[:ALLOC]),
                "screens": CALIBRATIONS,
                "recipe": f"the bench's full probe ({PROBE})",
                "read_mb_s": sorted(round(x) for x in reads),
                "write_mb_s": sorted(round(x) for x in writes),
            },
            "healthy_median_mb_s": {"read": round(read), "write": round(write)},
            "healthy_median_unthrottled_read_mb_s": unthrottled,
            "slower_nodes": {
                n: {"read_mb_s": round(r / 1e6), "write_mb_s": round(w / 1e6)} for n in SLOWER
            },
            "slow_node_read_mb_s": round(slow / 1e6, 1),
        },
    )


def job_lines(text: str, job_id: str) -> list[str]:
    """The prolog log lines of ``job_id``'s prologs (each starts with `job N ...`)."""
    mine: list[str] = []
    current = None
    for line in text.splitlines():
        if "screener prolog:" not in line:
            continue
        m = JOB_RE.search(line)
        if m:
            current = m.group(1)
        if current == job_id:
            mine.append(line)
    return mine


def healthy_full_probes(lines: list[str], slow_node: str | None) -> list[str]:
    """The healthy nodes the job's prologs probed in full after a triage (or its second
    look), once per prolog that did (the slow node left out)."""
    probed: list[str] = []
    for line in lines:
        m = FULL_RE.search(line)
        if m:
            probed += [n for n in expand_nodeset(m.group(1)) if n != slow_node]
    return probed


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
    probe: dict[str, Any] | None = None,
) -> None:
    """The bench's policy; ``seq_bs`` sets [prolog] triage_seq_bs (None: its default),
    ``write`` [prolog] triage_write, ``rand`` triage_rand_read, ``confirm_all`` [verdict]
    confirm_every_job (the re-probe runs the whole recipe, as before 2026-11-26 04:30),
    ``decisive`` [verdict] decisive_ratio = 0.1 (a clear slow reader decided in round 1);
    ``triage`` or ``decisive`` None: the shipped default (mode "default"); ``seq_iodepth``
    [prolog] seq_iodepth (None: its default); ``probe`` keys over PROBE (a calibration)."""
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
        probe={**PROBE, **(probe or {})},
        prolog=prolog,
        transport={"command_timeout_s": 120.0},
        verdict=verdict,
        # +rolling: one rolling job makes every node fresh; +sweep: the shipped learning reads
        sweep={"rolling_nodes": NODES, "triage_reads": SweepPolicy().triage_reads},
    )


def script(out: Path) -> Path:
    path = out / "job.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'date +%s.%N > {out}/start-"$SLURM_JOB_ID"\n'
        f'srun hostname > {out}/hosts-"$SLURM_JOB_ID"\n'
    )
    return path


def learning(cluster: ClusterHandle, out: Path, log: Path, aged: Path | None = None) -> list[float]:
    """DD_READINGS_MIN healthy jobs over every node (the nodes learn their dd level); each
    one's prolog wall. ``aged``: the store moved 2 h back after each job, so the next one
    is not fresh and triages again (+learned: a site's jobs hours apart)."""
    walls: list[float] = []
    for _ in range(DD_READINGS_MIN):
        if aged is not None:
            age_store(aged, timedelta(hours=2))
        n = str(len(cluster.nodes))
        job_id = sbatch(cluster, "-N", n, "--comment", "screener=on", str(script(out)))
        job = wait_or_stuck(cluster, job_id, 300, need=len(cluster.nodes))
        if job["job_state"] == "NEVER_STARTED":  # a node drained: the fleet cannot learn
            print(f"learning job {job_id} never started: {job['drained']} drained", flush=True)
            break
        text = log.read_text() if log.exists() else ""
        walls += [float(w) for j, w in WALL_RE.findall(text) if j == job_id]
    return walls


def wait_or_stuck(
    cluster: ClusterHandle, job_id: str, timeout: float = 600.0, need: int = ALLOC
) -> dict[str, Any]:
    """wait_job, but when drains leave fewer than ``need`` nodes the job would pend for ever
    (the mixed fleet's 0.6x nodes drained as slow): cancelled at once, its record with
    job_state NEVER_STARTED; "drained" lists the drained nodes either way."""
    deadline = time.monotonic() + timeout

    def drained() -> list[str]:
        out = cluster.slurm("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return sorted(
            n for n, st in states.items() if st.rstrip("*~#$@") in ("drain", "drng", "down")
        )

    while True:
        job = job_state(cluster, job_id)
        if job["job_state"] not in ACTIVE:
            return {**job, "drained": drained()}
        gone = drained()
        if job["job_state"] == "PENDING" and NODES - len(gone) < need:
            cluster.slurm("scancel", job_id)
            wait_job(cluster, job_id, timeout=60)
            return {**job, "job_state": "NEVER_STARTED", "drained": gone}
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} did not finish in {timeout:g}s: {job['job_state']}")
        time.sleep(1.0)


# Every time the prolog's freshness, the sentinel's readings and history read.
AGED = (
    ("runs", "started_at"),
    ("runs", "finished_at"),
    ("verdicts", "started_at"),
    ("sentinel_readings", "at"),
    ("node_events", "at"),
)


def age_store(path: Path, by: timedelta) -> None:
    """Move every screen of the SQLite store at ``path`` ``by`` into the past (+learned:
    the learning jobs become a site's earlier jobs, history but not fresh)."""
    with sqlite3.connect(path) as db:
        for table, column in AGED:
            rows = db.execute(f"SELECT rowid, {column} FROM {table}").fetchall()
            for rowid, value in rows:
                if value is None:
                    continue
                moved = (datetime.fromisoformat(value) - by).isoformat(sep=" ")
                db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (moved, rowid))


def rolling(cluster: ClusterHandle, cfg: Path, out: Path, nightly: bool = False) -> float:
    """One rolling sweep over every idle node (all healthy), or the nightly one (``nightly``:
    its full probe, then its learning reads of the triage's recipe, sweep/learn.py); its
    wall (submit -> end)."""
    t0 = time.monotonic()
    res = run_screener(
        cluster, cfg, "sweep", "--submit", "--wait", *([] if nightly else ["--rolling"]),
        "--script", str(REPO / "jobs" / "sweep.sbatch"), cwd=out,
    )  # fmt: skip
    logs = "".join(p.read_text() for p in sorted(out.glob("slurm-*.out")))
    if res.returncode != 0 or f"holds {fold_nodes(cluster.nodes)}" not in logs:
        kind = "nightly" if nightly else "rolling"
        raise SystemExit(f"the {kind} sweep did not hold every node: {res.stderr}{logs}")
    return round(time.monotonic() - t0, 1)


def case(
    cluster: ClusterHandle, d: Path, name: str, mode: str, rep: int, slow: bool, fleet: Fleet
) -> dict[str, Any]:
    """One screened job on ``fleet``: submit -> start, prolog walls, where it ran, the healthy
    nodes probed in full. ``mode``: off, on, or
    on:BS (triage with [prolog] triage_seq_bs = BS); a "+write" suffix turns triage_write
    on, "+norand" triage_rand_read off, "+confirmall" confirm_every_job on, "+decisive"
    decisive_ratio 0.1, "+qdN" [prolog] seq_iodepth N; "default": triage and decisive_ratio
    as shipped; "+hookd" every hook of the case through `screener hookd`."""
    base, *plus = mode.split("+")
    depths = [int(p[2:]) for p in plus if p.startswith("qd")]
    triage, _, seq_bs = base.partition(":")
    tag = f"{fleet.name}-{name}-{mode.replace(':', '-').replace('+', '-')}-{rep}"
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
    fleet.apply(cluster)
    # The wrapper names d/hookd.sock: with no server there, each hook runs in its own
    # process (and logs that hookd was not used). The rolling sweep's hooks use it too.
    hookd = start_hookd(d / "hookd.sock") if "hookd" in plus else None
    try:
        if "history" in plus:
            # +history: as a site's sweeps leave it
            for _ in range(SWEEPS_SEEN):  # rules.MIN_HISTORY: a node's usual place counts
                seen_by_the_sweep(cluster, cfg, db, per_node=fleet.history_mb_s)
        swept = rolling(cluster, cfg, out, nightly=True) if "sweep" in plus else None
        rolled = rolling(cluster, cfg, out) if "rolling" in plus else None
        aged = out / "screener.db" if {"learned", "sweep"} & set(plus) else None
        learned = learning(cluster, out, log, aged) if {"rolling", "learned"} & set(plus) else None
        if aged is not None:  # those screens as a site's earlier ones leave them: not fresh
            age_store(aged, timedelta(hours=2))
        if slow:
            cluster.inject(cluster.nodes[0], "slow_read", fleet.slow)
        t0 = time.time()
        job_id = sbatch(cluster, "-N", str(ALLOC), "--comment", "screener=on", str(script(out)))
        job = wait_or_stuck(cluster, job_id)
    finally:
        if hookd is not None:
            hookd.terminate()
            hookd.wait(30)
    start_file = out / f"start-{job_id}"
    started = float(start_file.read_text()) if start_file.exists() else None
    text = log.read_text() if log.exists() else ""
    walls = [float(w) for j, w in WALL_RE.findall(text) if j == job_id]
    hosts = out / f"hosts-{job_id}"
    full = healthy_full_probes(job_lines(text, job_id), cluster.nodes[0] if slow else None)
    row = {
        "fleet": fleet.name,
        "case": name,
        "triage": mode,
        "rep": rep,
        "job": job_id,
        "state": job["job_state"],
        "restarts": job["restart_cnt"],
        "submit_to_start_s": None if started is None else round(started - t0, 1),
        "drained": job.get("drained", []),
        "last_prolog_wall_s": walls[-1] if walls else None,
        "prolog_walls_s": walls,
        "healthy_full_probes": len(full),
        "healthy_full_probed": full,
        "ran_on": sorted(hosts.read_text().split()) if hosts.exists() else [],
        "escalated": "after the triage, beside" in text,
        "rolling_wall_s": rolled,
        "nightly_sweep_wall_s": swept,
        "learning_prolog_walls_s": learned,
        "hookd": hookd is not None and "hookd not used" not in text,
        "log": text.splitlines(),
    }
    print(
        f"{tag}: submit->start {row['submit_to_start_s']}s, restarts {row['restarts']}, "
        f"prologs {walls}s, healthy full probes {len(full)}, slow node in job: "
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
        " node's full-probe baseline of 2 h ago (history, none fresh), +learned (with"
        " +history) three healthy jobs over every node first, aged 2 h (the triage has"
        " learned each node's place; none fresh), +sweep (with +history) one nightly sweep"
        " first (its learning reads included), aged 2 h, +qdN [prolog]"
        " seq_iodepth N (the sentinel's and the triage's sequential queue depth), +hookd"
        " every hook through `screener hookd`",
    )
    ap.add_argument("--cases", default=",".join(CASES), help="healthy, slow (both by default)")
    ap.add_argument(
        "--fleet",
        default=",".join(FLEETS),
        help="paced (every device at 300 MB/s), mixed (unpaced, node05 and node07 at 0.6x"
        " of the healthy median), paced_mixed (paced, node05 and node07 at 0.6x of it); all"
        " by default, side by side",
    )
    ap.add_argument("--size-mib", type=int, default=PROBE["size_mib"], help="probe region")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    ap.add_argument("--keep", type=Path, help="keep the hook logs and stores in this directory")
    args = ap.parse_args()
    PROBE["size_mib"] = args.size_mib
    modes = [m for m in args.modes.split(",") if m]
    if any(
        m.split("+")[0].partition(":")[0] not in ("default", "off", "on")
        or not {p for p in m.split("+")[1:] if not re.fullmatch(r"qd[1-9][0-9]*", p)}
        <= {
            "write",
            "norand",
            "confirmall",
            "decisive",
            "rolling",
            "history",
            "learned",
            "sweep",
            "hookd",
        }
        for m in modes
    ):
        raise SystemExit(
            "--modes: default, off, on or on:BS"
            " (+write, +norand, +confirmall, +decisive, +rolling, +history, +learned, +sweep,"
            " +qdN,"
            " +hookd),"
            f" not {args.modes!r}"
        )
    cases = [c for c in args.cases.split(",") if c]
    fleets = [f for f in args.fleet.split(",") if f]
    if not cases or not set(cases) <= set(CASES):
        raise SystemExit(f"--cases: {', '.join(CASES)}, not {args.cases!r}")
    if not fleets or not set(fleets) <= set(FLEETS) or len(set(fleets)) != len(fleets):
        raise SystemExit(f"--fleet: {', '.join(FLEETS)}, not {args.fleet!r}")
    rows: list[dict[str, Any]] = []
    setups: dict[str, Fleet] = {}
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    kept = tempfile.mkdtemp(dir=args.keep) if args.keep is not None else None
    with nullcontext(kept) if kept else tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cfg = d / "screener.toml"
        cfg.write_text("")
        # the paced fleet alone: paced by `up`, as before the mixed fleet; with the mixed
        # fleet unpaced, the paced fleet then set by the same throttles (Fleet.apply)
        paced_up = "mixed" not in fleets
        for cluster in hooked_cluster(
            d, cfg, nodes=NODES, hookd=str(d / "hookd.sock"), paced=paced_up
        ):
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
            for n in got.values():  # noise on this first screen costs the bench nothing
                if n["status"] != "OK":
                    print(f"layout screen: {n['node']} {n['status']} {n['reason']}", flush=True)
            for rep in range(args.repeat):
                for mode in modes:
                    for name in cases:
                        for f in fleets:  # fleets back to back: their ratio within one run
                            # the mixed fleet calibrated again before each case: unpaced
                            # rates follow the machine's load, which others' runs move
                            fleet = (
                                paced_fleet(cluster)
                                if f == "paced"
                                else paced_mixed_fleet(cluster)
                                if f == "paced_mixed"
                                else mixed_fleet(cluster, cfg, d)
                            )
                            setups.setdefault(f, fleet)
                            row = case(cluster, d, name, mode, rep, name == "slow", fleet)
                            rows.append({**row, "fleet_setup": fleet.about})
    per_fleet: dict[str, Any] = {}
    for f in fleets:
        summary: dict[str, Any] = {}
        for name in cases:
            for mode in modes:
                mine = [r for r in rows if (r["fleet"], r["case"], r["triage"]) == (f, name, mode)]
                summary[key(name, mode)] = {
                    "submit_to_start_s_median": statistics.median(started)
                    if (started := [r["submit_to_start_s"] for r in mine if r["submit_to_start_s"]])
                    else None,
                    "never_started": sum(r["submit_to_start_s"] is None for r in mine),
                    "drained": [r["drained"] for r in mine],
                    "runs": [r["submit_to_start_s"] for r in mine],
                    "last_prolog_wall_s": [r["last_prolog_wall_s"] for r in mine],
                    "prolog_walls_s": [r["prolog_walls_s"] for r in mine],
                    "healthy_full_probes": [r["healthy_full_probes"] for r in mine],
                    "rolling_wall_s": [r["rolling_wall_s"] for r in mine],
                    "nightly_sweep_wall_s": [r["nightly_sweep_wall_s"] for r in mine],
                    "slow_node_kept_out": all("node01" not in r["ran_on"] for r in mine)
                    if name == "slow"
                    else None,
                }
        # the first case's setup; each row has its own ("fleet_setup")
        per_fleet[f] = {**setups[f].about, "summary": summary}
    side = side_by_side(per_fleet, cases, modes)
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
        "cluster_up_paced": PACE if paced_up else None,
        "slow_node": "node01 read at 1/20 of the fleet's healthy rate",
        "mixed_slower_nodes": f"{', '.join(SLOWER)} at {SLOWER_FACTOR}x"
        if "mixed" in fleets
        else None,
        "fleets": per_fleet,
        "side_by_side": side,
        "rows": rows,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for line in render(side, fleets):
        print(line)
    return 0


def key(name: str, mode: str) -> str:
    return f"{name}_triage_{mode.replace(':', '_').replace('+', '_')}"


def side_by_side(per_fleet: dict[str, Any], cases: list[str], modes: list[str]) -> list[Any]:
    """Per case and mode, each fleet's figures, and the mixed/paced ratio of the medians."""
    out: list[dict[str, Any]] = []
    for name in cases:
        for mode in modes:
            row: dict[str, Any] = {"case": name, "mode": mode}
            for f, fleet in per_fleet.items():
                s = fleet["summary"][key(name, mode)]
                row[f] = {
                    "submit_to_start_s_median": s["submit_to_start_s_median"],
                    "runs": s["runs"],
                    "prolog_walls_s": s["prolog_walls_s"],
                    "healthy_full_probes": s["healthy_full_probes"],
                    "never_started": s["never_started"],
                    "drained": s["drained"],
                }
            medians = [row.get(f, {}).get("submit_to_start_s_median") for f in ("paced", "mixed")]
            if all(medians):
                row["mixed_over_paced"] = round(
                    row["mixed"]["submit_to_start_s_median"]
                    / row["paced"]["submit_to_start_s_median"],
                    2,
                )
            out.append(row)
    return out


def render(side: list[dict[str, Any]], fleets: list[str]) -> list[str]:
    """The side-by-side table: per fleet, the median start, the runs' prolog walls (one
    list per run), healthy nodes probed in full and healthy nodes drained, per run."""
    head = f"{'case':<8} {'mode':<24}" + "".join(
        f" | {f + ': start':>13} {'prolog walls':<22} {'full':<6} {'drained':<7}" for f in fleets
    )
    if len(fleets) == 2:
        head += " | mixed/paced"
    lines = [head, "-" * len(head)]
    for row in side:
        line = f"{row['case']:<8} {row['mode']:<24}"
        for f in fleets:
            s = row[f]
            walls = ";".join(",".join(f"{w:g}" for w in run) for run in s["prolog_walls_s"])
            full = ",".join(str(n) for n in s["healthy_full_probes"])
            drains = ",".join(str(len([n for n in r if n != "node01"])) for r in s["drained"])
            median = s["submit_to_start_s_median"]
            start = "never" if median is None else f"{median:.1f}s"
            line += f" | {start:>13} {walls:<22} {full:<6} {drains:<7}"
        if "mixed_over_paced" in row:
            line += f" | {row['mixed_over_paced']:>11}"
        lines.append(line)
    return lines


if __name__ == "__main__":
    sys.exit(main())
