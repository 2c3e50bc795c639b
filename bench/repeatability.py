"""Do verdicts repeat? (issue 24) The same fault classes screened N times on an 8-node
emulated fleet, each scenario with a fresh store and again with history, as issue 24 tried
them: the policy a small-scratch site writes (256 MiB region, runtime 2 s, ramp 0.5 s), on
one or both fleets (``--fleet``, each screened in the same run, one after the other):
- mixed (the default; issue 44): unpaced devices (healthy nodes spread ~2x within one run
  on the 2 shared cores), and node05 and node07, a slower drive model, read and write at
  0.6x of the others' median, measured by a second calibration screen with the two
  throttled (they hand their share of the cores to the others); they are expected OK
  unless a scenario throttles them.
- paced: every device paced at 300 MB/s and 20,000 read IOPS first (tests/hooked_cluster.PACE,
  PACE_IOPS, set as throttles on the unpaced cluster), as the hooked clusters run.
- paced_mixed: the paced fleet with node05 and node07 at 0.6x of its median: a mixed
  partition without the unpaced fleet's emulation artifacts (a blkio-throttled node's
  slices read as stalls and tails beside unthrottled peers; unpaced peers read faster when
  fewer nodes share the 2 cores, as in a confirmation round).

Scenarios (rates relative to the fleet's healthy median measured by a calibration screen:
the mixed fleet's before its two 0.6x nodes are set, the paced fleet's under the pace):
- healthy: nobody throttled; every node OK.
- pair_quarter: two nodes read at 1/4; both SLOW_READ.
- pair_043: two nodes read at 0.43x (issue 24's pair that flipped); both SLOW_READ.
- one_third: one node reads at 1/3; SLOW_READ.
- stalls: one node's reads stop ~150 ms about every second (bench/stall.py); flagged
  (DEGRADED or SLOW).
- shared_7of8: seven nodes read at 1/6 together, one untouched; nobody SLOW (a shared
  cause is not blamed on one node).
- three_tenth: three of the eight read at 1/10; all three SLOW_READ.
- stalls_heavy: one node's reads stop 0.5 s of every 1.5 s; flagged.
- small3 / small4: a 3- or 4-node allocation (the first nodes) with one node at 1/4; SLOW.
- small3_healthy: a healthy 3-node allocation; every node OK.
- fleet_6x: every node reads and writes at 1/6 together; nobody SLOW.
- fleet_6x_outlier50: the same with one node reading at 1/50 of the healthy median; that
  node SLOW, nobody else.
- fleet_read_6x (issue 44): every node reads at 1/6 together, writes untouched; nobody SLOW
  (every node's write/read ratio is over 5x: a shared cause).
- shared_7of8_reads (issue 44): seven nodes read at 1/6 together, writes untouched; nobody
  SLOW. Unlike shared_7of8 the untouched node is node05 (a 0.6x node in the mixed fleet).
- pair_3x4x (issue 44): node02 reads at 1/3 and node04 at 1/4 at once; both SLOW_READ.
- mixed_healthy (issue 44): no fault, the fleet alone (in the mixed fleet, its two 0.6x
  nodes); nobody SLOW, the 0.6x nodes OK.

History mode: each scenario gets its own store, taught by three healthy full screens first
(`screener screen`, as the nightly sweep teaches, also with ``--prolog``; rules.MIN_HISTORY;
``--shared-history``: one store for all, in order, as the first matrix ran).

Per scenario, mode and node: how often the verdict came out as expected, and each verdict's
margin to the deciding thresholds (read / peer median against `min_peer_drop`, robust z
against `-z_threshold`); per fleet, the expected-SLOW nodes caught (n/N), the stallers
flagged and the healthy nodes (expected OK or not SLOW) that came out SLOW. Writes
bench/results/repeatability.json (per fleet under "fleets") and prints the tables.
``--ramp/--runtime`` screen with another recipe (the prolog triage's: 0.25 s + 0.5 s);
``--prolog`` screens with `screener prolog` and [prolog] triage on (a dry run): the triage,
then the full probe (this recipe) of what it left ambiguous, each node's last verdict.

    .venv/bin/python bench/repeatability.py [--repeat 5] [--scenarios a,b]
        [--fleet mixed,paced] [--prolog] [--out F]
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stall import Stall
from deploy.minicluster import Cluster, ClusterHandle
from deploy.minicluster.slots import claim_slot
from screener import __version__
from tests.hooked_cluster import PACE, PACE_IOPS, SCREENER, write_config

RESULTS = Path(__file__).resolve().parent / "results" / "repeatability.json"
NODES = 8
PROBE = {"size_mib": 256, "runtime_s": 2.0, "ramp_s": 0.5}
SLOW = ("SLOW_READ", "SLOW_WRITE")
FLEETS = ("mixed", "paced", "paced_mixed")
MIXED_SLOWER = (4, 6)  # node05, node07: the mixed fleet's slower drive model
SLOWER_FACTOR = 0.6
ROUND1_RE = re.compile(r"round 1: seq read [0-9,.]+ MB/s = ([0-9.]+)x")

# scenario -> (throttled node index -> fraction of the healthy median (reads only), "rw:F"
#             (reads and writes at F), "stall" or "stall_heavy"), expectation per node
#             index (default as given), and how many nodes are screened (the first ones)
Scenario = tuple[dict[int, float | str], dict[int, str], str, int]
SCENARIOS: dict[str, Scenario] = {
    "healthy": ({}, {}, "OK", NODES),
    "pair_quarter": ({1: 0.25, 4: 0.25}, {1: "SLOW", 4: "SLOW"}, "OK", NODES),
    # issue 24's flipping case: the pair read 0.43x the healthy median (717/727 vs ~1,660)
    "pair_043": ({1: 0.43, 4: 0.43}, {1: "SLOW", 4: "SLOW"}, "OK", NODES),
    "one_third": ({2: 1 / 3}, {2: "SLOW"}, "OK", NODES),
    "three_tenth": ({0: 0.1, 3: 0.1, 6: 0.1}, {0: "SLOW", 3: "SLOW", 6: "SLOW"}, "OK", NODES),
    "stalls": ({3: "stall"}, {3: "FLAGGED"}, "OK", NODES),
    "stalls_heavy": ({5: "stall_heavy"}, {5: "FLAGGED"}, "OK", NODES),
    "small3": ({1: 0.25}, {1: "SLOW"}, "OK", 3),
    "small4": ({2: 0.25}, {2: "SLOW"}, "OK", 4),
    "small3_healthy": ({}, {}, "OK", 3),
    "shared_7of8": ({i: 1 / 6 for i in range(7)}, {}, "NOT_SLOW", NODES),
    "fleet_6x": ({i: "rw:0.1667" for i in range(NODES)}, {}, "NOT_SLOW", NODES),
    "fleet_6x_outlier50": (
        {**{i: "rw:0.1667" for i in range(NODES)}, 6: 0.02},
        {6: "SLOW"},
        "NOT_SLOW",
        NODES,
    ),
    # issue 44's mixed-fleet cases
    "fleet_read_6x": ({i: 1 / 6 for i in range(NODES)}, {}, "NOT_SLOW", NODES),
    "shared_7of8_reads": ({i: 1 / 6 for i in range(NODES) if i != 4}, {}, "NOT_SLOW", NODES),
    "pair_3x4x": ({1: 1 / 3, 3: 0.25}, {1: "SLOW", 3: "SLOW"}, "OK", NODES),
    "mixed_healthy": ({}, {}, "NOT_SLOW", NODES),
}

# node -> throttle kind -> value: a fleet's healthy state, set before each screen
Base = dict[str, dict[str, int | str]]


def expected(fleet: str, scenario: str, i: int) -> str:
    """Node ``i``'s expected verdict in ``scenario`` on ``fleet``: the scenario's, but a
    mixed fleet's 0.6x node that the scenario leaves alone is expected OK."""
    spec, expect, default, _ = SCENARIOS[scenario]
    if i in expect:
        return expect[i]
    if fleet != "paced" and i in MIXED_SLOWER and i not in spec:
        return "OK"
    return default


class Based:
    """The cluster as bench/stall.py's Stall sees it: healing a node returns it to the
    fleet's ``base`` throttles (its pace), not to unthrottled."""

    def __init__(self, cluster: ClusterHandle, base: Base) -> None:
        self.cluster = cluster
        self.base = base

    def apply(self, node: str | None = None) -> None:
        """Set the base throttles (of ``node``, or of every node)."""
        for n, kinds in self.base.items():
            if node in (None, n):
                for kind, value in kinds.items():
                    self.cluster.inject(n, kind, value)

    def inject(self, node: str, kind: str, value: int | str | None = None) -> None:
        self.cluster.inject(node, kind, value)

    def heal(self, node: str | None = None) -> None:
        if node is not None and node in self.base:
            self.apply(node)  # the pace over the fault: never unthrottled meanwhile
        else:
            self.cluster.heal(node)
            self.apply(node)


def matches(expected: str, status: str) -> bool:
    if expected == "SLOW":
        return status in SLOW
    if expected == "FLAGGED":
        return status != "OK"
    if expected == "NOT_SLOW":
        return status not in SLOW
    return status == expected


def screen(cluster: ClusterHandle, cfg: Path, count: int = NODES) -> dict[str, Any]:
    env = {**cluster.env(), "SCREENER_CONFIG": str(cfg)}
    res = subprocess.run(
        [str(SCREENER), "screen", ",".join(cluster.nodes[:count]), "--json"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if res.returncode not in (0, 3):
        raise RuntimeError(f"screen exited {res.returncode}: {res.stderr[-2000:]}")
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


PROLOG_JOBS = iter(range(5000, 1_000_000))


@contextmanager
def _workdir(keep: Path | None) -> Iterator[str]:
    """The run's directory: ``keep`` (made, left in place), else a temporary one."""
    if keep is not None:
        keep.mkdir(parents=True)
        yield str(keep)
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield tmp


def prolog(cluster: ClusterHandle, cfg: Path, count: int = NODES) -> dict[str, Any]:
    """``--prolog``: `screener prolog` as slurmctld runs it (a dry run: decided and recorded,
    nobody drained), every node probed (fresh_s = 0); each node's verdict is its last of
    the job (the escalated full probe's, if the triage left it ambiguous), as `screen
    --json` would print it."""
    from screener.policy import load_policy
    from screener.store import open_store

    job = next(PROLOG_JOBS)
    nodes = cluster.nodes[:count]
    env = {
        **cluster.env(),
        "SCREENER_CONFIG": str(cfg),
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_NODELIST": ",".join(nodes),
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_NAME": "bench",
        "SLURM_JOB_COMMENT": "screener=on",
    }
    res = subprocess.run(
        [str(SCREENER), "prolog"], env=env, capture_output=True, text=True, timeout=900
    )
    if res.returncode != 0 or "fail open" in res.stderr:
        raise RuntimeError(f"prolog exited {res.returncode}: {res.stderr[-2000:]}")
    url = load_policy(cfg).store.url
    last: dict[str, Any] = {}
    with open_store(url) as store:
        runs = [r for r in store.latest_runs(20) if r.job_id == str(job)]
        seen: dict[str, list[dict[str, Any]]] = {}
        for r in reversed(runs):  # oldest first: the escalation's verdict wins
            for v in store.run_verdicts(r.id):
                # every screen of the node in this job (triage, second look, full probe), so
                # a healthy node's drain can be traced to the screen that began it
                screens = seen.setdefault(v.node, [])
                screens.append(
                    {"status": v.status.value, "signals": list(v.signals), "reason": v.reason[:600]}
                )
                last[v.node] = {
                    "screens": screens,
                    "node": v.node,
                    "status": v.status.value,
                    "read_mb_s": v.read_mb_s,
                    "write_mb_s": v.write_mb_s,
                    "peer_read_mb_s": v.peer_read_mb_s,
                    "z_read": v.z_read,
                    "reason": v.reason,
                    "escalated": len(runs) > 1 and r.id == runs[0].id,
                }
    return {"nodes": [last[n] for n in nodes if n in last]}


@contextmanager
def faults(
    cluster: ClusterHandle,
    spec: dict[int, float | str],
    median: float,
    wmedian: float,
    base: Base | None = None,
) -> Iterator[None]:
    """The fleet's ``base`` throttles, the scenario's faults over them; all healed after."""
    based = Based(cluster, base or {})
    based.apply()
    stall: Any = nullcontext()
    for i, how in spec.items():
        node = cluster.nodes[i]
        if how == "stall":
            # reads stop ~150 ms about every second: ~12 % of bandwidth (issue 24)
            stall = Stall(based, node, rate=1_000_000, on_s=0.15, off_s=0.85)
        elif how == "stall_heavy":
            stall = Stall(based, node, rate=1_000_000, on_s=0.5, off_s=1.0)
        elif isinstance(how, str) and how.startswith("rw:"):
            f = float(how[3:])
            cluster.inject(node, "slow_read", f"{int(median * f / 1e6)}M")
            cluster.inject(node, "slow_write", f"{int(wmedian * f / 1e6)}M")
        else:
            cluster.inject(node, "slow_read", f"{int(median * float(how) / 1e6)}M")
    try:
        with stall:
            yield
    finally:
        cluster.heal()


def margins(v: dict[str, Any], z_threshold: float, drop: float) -> dict[str, Any]:
    """How close the verdict sat to the peer rule's two thresholds (negative = past it)."""
    ratio = None
    if v.get("read_mb_s") and v.get("peer_read_mb_s"):
        ratio = v["read_mb_s"] / v["peer_read_mb_s"]
    z = v.get("z_read")
    # A confirmed verdict compares round 2 (fewer probes at once, faster references); its
    # reason keeps round 1's ratio, where a borderline node is a suspect or not.
    m = ROUND1_RE.search(v.get("reason", ""))
    round1 = float(m.group(1)) if m else ratio
    return {
        "round1_ratio": None if round1 is None else round(round1, 3),
        "ratio": None if ratio is None else round(ratio, 3),
        "ratio_margin": None if ratio is None else round(ratio - drop, 3),
        "z": None if z is None else round(z, 2),
        "z_margin": None if z is None else round(z + z_threshold, 2),
    }


def set_slower(cluster: ClusterHandle, base: Base, read: float, write: float) -> None:
    """The slower drive model in ``base``: node05 and node07 at SLOWER_FACTOR x ``read`` and
    ``write`` (bytes/s), over their pace if any (paced_mixed keeps its 4k pace)."""
    for i in MIXED_SLOWER:
        base[cluster.nodes[i]] = {
            **base.get(cluster.nodes[i], {}),
            "slow_read": int(read * SLOWER_FACTOR),
            "slow_write": int(write * SLOWER_FACTOR),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument(
        "--fleet",
        default="mixed",
        help="mixed (unpaced, node05 and node07 at 0.6x), paced (every device at 300 MB/s"
        " first), paced_mixed (paced, node05 and node07 at 0.6x), or several, comma-separated"
        " (each scenario on each, back to back)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS, help="results JSON (a subset: elsewhere)")
    ap.add_argument(
        "--shared-history",
        action="store_true",
        help="one history store for all scenarios, in order (how the first matrix ran)",
    )
    ap.add_argument("--ramp", type=float, help=f"probe ramp_s (default {PROBE['ramp_s']})")
    ap.add_argument(
        "--runtime",
        type=float,
        help=f"probe runtime_s (default {PROBE['runtime_s']}; the prolog triage's: 0.5 s, "
        "with --ramp 0.25)",
    )
    ap.add_argument(
        "--prolog",
        action="store_true",
        help="screen with `screener prolog` and [prolog] triage on (a dry run), not `screen`",
    )
    ap.add_argument(
        "--triage-no-rand",
        action="store_true",
        help="with --prolog: [prolog] triage_rand_read = false (a sequential-read triage)",
    )
    ap.add_argument(
        "--seq-iodepth",
        type=int,
        default=None,
        help="with --prolog: [prolog] seq_iodepth (the triage's sequential queue depth);"
        " default: the shipped policy's",
    )
    ap.add_argument(
        "--triage-ramp",
        type=float,
        default=None,
        help="with --prolog: [prolog] triage_ramp_s (the triage's warm-up per job);"
        " default: the shipped policy's",
    )
    ap.add_argument(
        "--decisive",
        type=float,
        default=None,
        help="[verdict] decisive_ratio (0.1: a suspect whose two read jobs read at or below"
        " it is decided in round 1, no re-probe; 0: off); default: the shipped policy's",
    )
    ap.add_argument(
        "--confirm-references",
        type=int,
        default=None,
        help="[verdict] confirm_references (healthy nodes re-probed beside the suspects, at"
        " least); default: the shipped policy's",
    )
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the stores, configs and hook logs in this new directory (to read why a"
        " verdict came out as it did); default: a temporary directory, removed",
    )
    args = ap.parse_args()
    if args.keep is not None and args.keep.exists():
        ap.error(f"--keep: {args.keep} exists (give a new directory)")
    probe = dict(PROBE)
    if args.ramp is not None:
        probe["ramp_s"] = args.ramp
    if args.runtime is not None:
        probe["runtime_s"] = args.runtime
    chosen = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r} (known: {', '.join(SCENARIOS)})")
    fleets = [f for f in args.fleet.split(",") if f]
    if not fleets or not set(fleets) <= set(FLEETS) or len(set(fleets)) != len(fleets):
        ap.error(f"--fleet: {', '.join(FLEETS)} (or both), not {args.fleet!r}")
    rows: list[dict[str, Any]] = []
    not_screened: list[dict[str, Any]] = []
    setups: dict[str, dict[str, Any]] = {}
    with claim_slot() as slot, _workdir(args.keep) as tmp:
        mc = Cluster(slot.state_dir)
        try:
            cluster = ClusterHandle(
                mc, mc.up(NODES, subnet=slot.subnet, slurm_port_base=slot.slurm_port_base)
            )
            from screener.policy import PrologPolicy, VerdictPolicy

            vp = VerdictPolicy()
            counter = iter(range(1_000_000))

            def config(db: str) -> Path:
                cfg = Path(tmp) / f"screener-{next(counter)}.toml"
                extra: dict[str, Any] = {}
                if args.prolog:
                    extra = {
                        "prolog": {
                            "triage": True,
                            "fresh_s": 0.0,
                            "iostat": False,
                            "triage_rand_read": not args.triage_no_rand,
                        },
                        "slurm": {"dry_run": True},
                    }
                    if args.seq_iodepth is not None:
                        extra["prolog"]["seq_iodepth"] = args.seq_iodepth
                    if args.triage_ramp is not None:
                        extra["prolog"]["triage_ramp_s"] = args.triage_ramp
                if args.decisive is not None:
                    extra.setdefault("verdict", {})["decisive_ratio"] = args.decisive
                if args.confirm_references is not None:
                    extra.setdefault("verdict", {})["confirm_references"] = args.confirm_references
                write_config(cfg, cluster, db, Path(tmp) / "log", probe=probe, **extra)
                return cfg

            run = prolog if args.prolog else screen
            # calibrated by `screen` (every job): the prolog's triage writes nothing
            bases: dict[str, Base] = {}
            medians: dict[str, tuple[float, float]] = {}
            for fleet in fleets:
                base: Base = {}
                if fleet in ("paced", "paced_mixed"):  # as `up --pace`: reads, writes, 4k IOPS
                    every: dict[str, int | str] = {
                        "slow_read": PACE,
                        "slow_write": PACE,
                        "slow_randread": PACE_IOPS,
                    }
                    base = {n: dict(every) for n in cluster.nodes}
                with faults(cluster, {}, 0.0, 0.0, base):  # mixed: all unpaced here
                    calib = screen(cluster, config(f"sqlite:///{tmp}/calib-{fleet}.db"))
                median = statistics.median(n["read_mb_s"] for n in calib["nodes"]) * 1e6
                wmedian = statistics.median(n["write_mb_s"] for n in calib["nodes"]) * 1e6
                slower_at = (median, wmedian)
                remeasured = False  # mixed: the pair set from the rest measured beside it
                if fleet in ("mixed", "paced_mixed"):  # the slower model: 0.6x the median
                    set_slower(cluster, base, median, wmedian)
                if fleet == "mixed":
                    # Unpaced, the others share the 2 cores: throttling the slower model hands
                    # its CPU to them (997 -> 1,332-1,493 MB/s, the pair 0.41-0.46x in 8-node
                    # rounds: 2026-12-03). 0.6x *of the rest*: measured with it throttled.
                    with faults(cluster, {}, 0.0, 0.0, base):
                        again = screen(cluster, config(f"sqlite:///{tmp}/calib2-{fleet}.db"))
                    rest = [
                        n
                        for n in again["nodes"]
                        if cluster.nodes.index(n["node"]) not in MIXED_SLOWER
                    ]
                    remeasured = True
                    slower_at = (
                        statistics.median(n["read_mb_s"] for n in rest) * 1e6,
                        statistics.median(n["write_mb_s"] for n in rest) * 1e6,
                    )
                    set_slower(cluster, base, *slower_at)
                bases[fleet], medians[fleet] = base, (median, wmedian)
                slower = [cluster.nodes[i] for i in MIXED_SLOWER] if fleet != "paced" else []
                print(
                    f"{fleet} fleet: healthy median seq read {median / 1e6:,.0f} MB/s, "
                    f"write {wmedian / 1e6:,.0f} MB/s"
                    + (f"; {', '.join(slower)} at {SLOWER_FACTOR}x" if slower else "")
                    + (
                        f" of the rest's {slower_at[0] / 1e6:,.0f} MB/s (measured with them"
                        " throttled)"
                        if remeasured
                        else ""
                    ),
                    flush=True,
                )
                setups[fleet] = {
                    "healthy_median_mb_s": {
                        "read": round(median / 1e6),
                        "write": round(wmedian / 1e6),
                    },
                    "calibration_read_mb_s": sorted(round(n["read_mb_s"]) for n in calib["nodes"]),
                    "devices_paced": {"bps": PACE, "read_iops": PACE_IOPS}
                    if fleet != "mixed"
                    else None,
                    "slower_nodes": {
                        n: {
                            "read_mb_s": round(slower_at[0] * SLOWER_FACTOR / 1e6),
                            "write_mb_s": round(slower_at[1] * SLOWER_FACTOR / 1e6),
                        }
                        for n in slower
                    },
                    # mixed: the rest's median with the slower model throttled (its 0.6x of
                    # that), after the first calibration's median (all unthrottled)
                    "rest_median_with_slower_mb_s": round(slower_at[0] / 1e6)
                    if remeasured
                    else None,
                }
            for name in chosen:
                spec, _, _, count = SCENARIOS[name]
                for fleet in fleets:  # back to back: the fleets' figures from one run
                    base = bases[fleet]
                    median, wmedian = medians[fleet]
                    # Each scenario's history mode has its own store, taught by three healthy
                    # screens first: one store across scenarios let shared_7of8 teach its
                    # untouched node an uncontended 12.8 GB/s, and fleet_6x then found that
                    # node at 0.02x its own history (bench/results/repeatability_matrix.json).
                    history_db = f"sqlite:///{tmp}/history-{fleet}-{name}.db"
                    if args.shared_history:
                        history_db = f"sqlite:///{tmp}/history-{fleet}.db"
                    # Taught by full screens over the scenario's nodes, as a site's sweeps
                    # teach (docs/slurm.md: one sweep first), also with --prolog: prologs
                    # alone never taught the mixed fleet's 0.6x pair its place (SLOW or
                    # DEGRADED in each, never a baseline), and 2026-12-03's --prolog run
                    # then drained it in every history screen.
                    if not args.shared_history or name == chosen[0]:
                        for _ in range(3):  # the healthy fleet (its 0.6x nodes): MIN_HISTORY
                            with faults(cluster, {}, median, wmedian, base):
                                screen(
                                    cluster,
                                    config(history_db),
                                    NODES if args.shared_history else count,
                                )
                    for mode in ("fresh", "history"):
                        for rep in range(args.repeat):
                            fresh_db = f"sqlite:///{tmp}/{fleet}-{name}-{rep}.db"
                            cfg = config(fresh_db if mode == "fresh" else history_db)
                            key = (fleet, name, mode, rep)
                            with faults(cluster, spec, median, wmedian, base):
                                t0 = time.monotonic()
                                doc = run(cluster, cfg, count)
                                wall = round(time.monotonic() - t0, 1)
                            for v in doc["nodes"]:
                                i = cluster.nodes.index(v["node"])
                                want = expected(fleet, name, i)
                                rows.append(
                                    {
                                        "fleet": fleet,
                                        "scenario": name,
                                        "mode": mode,
                                        "rep": rep,
                                        "node": v["node"],
                                        "expected": want,
                                        "status": v["status"],
                                        "ok": matches(want, v["status"]),
                                        **margins(v, vp.z_threshold, vp.min_peer_drop),
                                        "reason": v.get("reason", "")[:600],
                                        "screen_wall_s": wall,
                                        "escalated": v.get("escalated", False),
                                        "screens": v.get("screens", []),
                                    }
                                )
                            this = [
                                r
                                for r in rows
                                if (r["fleet"], r["scenario"], r["mode"], r["rep"]) == key
                            ]
                            hits = sum(r["ok"] for r in this)
                            # a dry-run prolog stops where a live one drains and requeues:
                            # the nodes it held back for later screens are never screened
                            seen = {r["node"] for r in this}
                            unseen = [n for n in cluster.nodes[:count] if n not in seen]
                            if unseen:
                                not_screened.append(
                                    {"fleet": fleet, "scenario": name, "mode": mode,
                                     "rep": rep, "nodes": unseen}
                                )  # fmt: skip
                            gone = f" ({', '.join(unseen)} not screened)" if unseen else ""
                            print(
                                f"{fleet} {name} {mode} {rep}: {hits}/{count} as expected{gone}",
                                flush=True,
                            )
        finally:
            mc.down()
    table = summarise(rows)
    for line in render(table):
        print(line)
    for fleet in fleets:
        setups[fleet]["summary"] = fleet_summary([r for r in rows if r["fleet"] == fleet])
    for line in render_fleets(setups):
        print(line)
    doc = {
        "benchmark": "repeatability",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "screener": __version__,
        "cores": os.cpu_count(),
        "nodes": NODES,
        "probe": probe,
        "via": "screener prolog, [prolog] triage on, dry run" if args.prolog else "screener screen",
        "triage_jobs": ("seq_read" if args.triage_no_rand else "seq_read, rand_read")
        if args.prolog
        else None,
        "decisive_ratio": VerdictPolicy().decisive_ratio
        if args.decisive is None
        else args.decisive,
        "seq_iodepth": (
            (PrologPolicy().seq_iodepth if args.seq_iodepth is None else args.seq_iodepth)
            if args.prolog
            else None
        ),
        "triage_ramp_s": (
            (PrologPolicy().triage_ramp_s if args.triage_ramp is None else args.triage_ramp)
            if args.prolog
            else None
        ),
        "triage_rand_ramp_s": PrologPolicy().triage_rand_ramp_s if args.prolog else None,
        "repeat": args.repeat,
        "history_store": "shared, in scenario order" if args.shared_history else "per scenario",
        "mixed_slower_nodes": f"node05, node07 at {SLOWER_FACTOR}x (reads and writes)",
        "fleets": setups,
        "table": table,
        "verdicts": rows,
        "not_screened": not_screened,  # held back, then the job requeued (a dry run stops there)
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fleet, scenario, mode and expectation class (the faulty nodes, the rest): hit
    rate and the margins' median and worst."""
    out: list[dict[str, Any]] = []
    keys = sorted({(r["fleet"], r["scenario"], r["mode"], r["expected"]) for r in rows}, key=str)
    for fleet, scenario, mode, expected in keys:
        group = [
            r
            for r in rows
            if (r["fleet"], r["scenario"], r["mode"], r["expected"])
            == (fleet, scenario, mode, expected)
        ]
        ratios = [r["ratio"] for r in group if r["ratio"] is not None]
        first = [r["round1_ratio"] for r in group if r.get("round1_ratio") is not None]
        # the worst case: the faulty node that read fastest, the healthy one that read slowest
        pick: Callable[[list[float]], float] = max if expected in ("SLOW", "FLAGGED") else min
        out.append(
            {
                "fleet": fleet,
                "scenario": scenario,
                "mode": mode,
                "expected": expected,
                "as_expected": f"{sum(r['ok'] for r in group)}/{len(group)}",
                "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
                "ratio_worst": round(pick(ratios), 3) if ratios else None,
                "round1_median": round(statistics.median(first), 3) if first else None,
                "round1_worst": round(pick(first), 3) if first else None,
                "statuses": dict(sorted(_count(r["status"] for r in group).items())),
            }
        )
    return out


def _count(items: Iterator[str] | Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in items:
        counts[i] = counts.get(i, 0) + 1
    return counts


def render(table: list[dict[str, Any]]) -> list[str]:
    head = (
        f"{'fleet':<6} {'scenario':<18} {'mode':<8} {'expected':<9} {'as expected':>11} "
        f"{'ratio med':>9} {'worst':>6} {'r1 med':>6} {'r1 wst':>6}  statuses"
    )
    lines = [head, "-" * len(head)]
    for t in table:
        lines.append(
            f"{t['fleet']:<6} {t['scenario']:<18} {t['mode']:<8} {t['expected']:<9} "
            f"{t['as_expected']:>11} "
            f"{t['ratio_median'] if t['ratio_median'] is not None else '-':>9} "
            f"{t['ratio_worst'] if t['ratio_worst'] is not None else '-':>6} "
            f"{t.get('round1_median') if t.get('round1_median') is not None else '-':>6} "
            f"{t.get('round1_worst') if t.get('round1_worst') is not None else '-':>6}  "
            + ", ".join(f"{k} {v}" for k, v in t["statuses"].items())
        )
    return lines


def fleet_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One fleet's record: expected-SLOW nodes caught (n/N), stallers flagged (n/N), and the
    healthy nodes (expected OK or not SLOW) that came out SLOW; overall and per mode."""

    def record(group: list[dict[str, Any]]) -> dict[str, Any]:
        slow = [r for r in group if r["expected"] == "SLOW"]
        stall = [r for r in group if r["expected"] == "FLAGGED"]
        healthy = [r for r in group if r["expected"] in ("OK", "NOT_SLOW")]
        wrong = [r for r in healthy if r["status"] in SLOW]
        return {
            "expected_slow_caught": f"{sum(r['status'] in SLOW for r in slow)}/{len(slow)}",
            "stallers_flagged": f"{sum(r['status'] != 'OK' for r in stall)}/{len(stall)}",
            "healthy_slow": len(wrong),
            "healthy_nodes": len(healthy),
            "healthy_slow_where": sorted(
                {f"{r['scenario']} {r['mode']} {r['node']}" for r in wrong}
            ),
        }

    modes = sorted({r["mode"] for r in rows})
    return {
        **record(rows),
        "by_mode": {m: record([r for r in rows if r["mode"] == m]) for m in modes},
    }


def render_fleets(setups: dict[str, dict[str, Any]]) -> list[str]:
    head = (
        f"{'fleet':<6} {'mode':<8} {'expected-SLOW caught':>20} {'stallers flagged':>16} "
        f"{'healthy SLOW':>14}"
    )
    lines = [head, "-" * len(head)]
    for fleet, setup in setups.items():
        s = setup.get("summary")
        if s is None:
            continue
        for mode, r in [("all", s), *s["by_mode"].items()]:
            lines.append(
                f"{fleet:<6} {mode:<8} {r['expected_slow_caught']:>20} "
                f"{r['stallers_flagged']:>16} "
                f"{str(r['healthy_slow']) + '/' + str(r['healthy_nodes']):>14}"
            )
    return lines


if __name__ == "__main__":
    sys.exit(main())
