"""Do verdicts repeat? (issue 24) The same fault classes screened N times on an 8-node
emulated fleet, each scenario with a fresh store and again with history, as issue 24 tried
them: the policy a small-scratch site writes (256 MiB region, runtime 2 s, ramp 0.5 s) and
unpaced devices (healthy nodes spread ~2x within one run on the 2 shared cores).

Scenarios (rates relative to the healthy median measured by a calibration screen):
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

History mode: each scenario gets its own store, taught by two healthy screens first
(``--shared-history``: one store for all, in order, as the first matrix ran).

Per scenario, mode and node: how often the verdict came out as expected, and each verdict's
margin to the deciding thresholds (read / peer median against `min_peer_drop`, robust z
against `-z_threshold`). Writes bench/results/repeatability.json and prints the table.
``--ramp/--runtime`` screen with another recipe (the prolog triage's: 0.25 s + 0.5 s);
``--prolog`` screens with `screener prolog` and [prolog] triage on (a dry run): the triage,
then the full probe (this recipe) of what it left ambiguous, each node's last verdict.

    .venv/bin/python bench/repeatability.py [--repeat 5] [--scenarios a,b] [--out F]
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
from tests.hooked_cluster import SCREENER, write_config

RESULTS = Path(__file__).resolve().parent / "results" / "repeatability.json"
NODES = 8
PROBE = {"size_mib": 256, "runtime_s": 2.0, "ramp_s": 0.5}
SLOW = ("SLOW_READ", "SLOW_WRITE")
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
}


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
        for r in reversed(runs):  # oldest first: the escalation's verdict wins
            for v in store.run_verdicts(r.id):
                last[v.node] = {
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
    cluster: ClusterHandle, spec: dict[int, float | str], median: float, wmedian: float
) -> Iterator[None]:
    stall: Any = nullcontext()
    for i, how in spec.items():
        node = cluster.nodes[i]
        if how == "stall":
            # reads stop ~150 ms about every second: ~12 % of bandwidth (issue 24)
            stall = Stall(cluster, node, rate=1_000_000, on_s=0.15, off_s=0.85)
        elif how == "stall_heavy":
            stall = Stall(cluster, node, rate=1_000_000, on_s=0.5, off_s=1.0)
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
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
    args = ap.parse_args()
    probe = dict(PROBE)
    if args.ramp is not None:
        probe["ramp_s"] = args.ramp
    if args.runtime is not None:
        probe["runtime_s"] = args.runtime
    chosen = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r} (known: {', '.join(SCENARIOS)})")
    rows: list[dict[str, Any]] = []
    with claim_slot() as slot, tempfile.TemporaryDirectory() as tmp:
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
                    extra["verdict"] = {"decisive_ratio": args.decisive}
                write_config(cfg, cluster, db, Path(tmp) / "log", probe=probe, **extra)
                return cfg

            run = prolog if args.prolog else screen
            # calibrated by `screen` (every job): the prolog's triage writes nothing
            calib = screen(cluster, config(f"sqlite:///{tmp}/calib.db"))
            median = statistics.median(n["read_mb_s"] for n in calib["nodes"]) * 1e6
            wmedian = statistics.median(n["write_mb_s"] for n in calib["nodes"]) * 1e6
            print(
                f"healthy median seq read {median / 1e6:,.0f} MB/s, "
                f"write {wmedian / 1e6:,.0f} MB/s",
                flush=True,
            )
            for name in chosen:
                spec, expect, default, count = SCENARIOS[name]
                # Each scenario's history mode has its own store, taught by two healthy
                # screens first: one store across scenarios let shared_7of8 teach its
                # untouched node an uncontended 12.8 GB/s, and fleet_6x then found that
                # node at 0.02x its own history (bench/results/repeatability_matrix.json).
                history_db = f"sqlite:///{tmp}/history-{name}.db"
                if not args.shared_history:
                    for _ in range(2):
                        run(cluster, config(history_db), count)
                elif name == chosen[0]:
                    for _ in range(2):
                        run(cluster, config(f"sqlite:///{tmp}/history.db"))
                if args.shared_history:
                    history_db = f"sqlite:///{tmp}/history.db"
                for mode in ("fresh", "history"):
                    for rep in range(args.repeat):
                        fresh_db = f"sqlite:///{tmp}/{name}-{rep}.db"
                        cfg = config(fresh_db if mode == "fresh" else history_db)
                        key = (name, mode, rep)
                        with faults(cluster, spec, median, wmedian):
                            t0 = time.monotonic()
                            doc = run(cluster, cfg, count)
                            wall = round(time.monotonic() - t0, 1)
                        for v in doc["nodes"]:
                            i = cluster.nodes.index(v["node"])
                            want = expect.get(i, default)
                            rows.append(
                                {
                                    "scenario": name,
                                    "mode": mode,
                                    "rep": rep,
                                    "node": v["node"],
                                    "expected": want,
                                    "status": v["status"],
                                    "ok": matches(want, v["status"]),
                                    **margins(v, vp.z_threshold, vp.min_peer_drop),
                                    "reason": v.get("reason", "")[:300],
                                    "screen_wall_s": wall,
                                    "escalated": v.get("escalated", False),
                                }
                            )
                        this = [r for r in rows if (r["scenario"], r["mode"], r["rep"]) == key]
                        hits = sum(r["ok"] for r in this)
                        print(f"{name} {mode} {rep}: {hits}/{count} as expected", flush=True)
        finally:
            mc.down()
    table = summarise(rows)
    for line in render(table):
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
        "healthy_median_mb_s": {"read": round(median / 1e6), "write": round(wmedian / 1e6)},
        "table": table,
        "verdicts": rows,
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario, mode and expectation class (the faulty nodes, the rest): hit rate and
    the margins' median and worst."""
    out: list[dict[str, Any]] = []
    keys = sorted({(r["scenario"], r["mode"], r["expected"]) for r in rows}, key=str)
    for scenario, mode, expected in keys:
        group = [
            r
            for r in rows
            if (r["scenario"], r["mode"], r["expected"]) == (scenario, mode, expected)
        ]
        ratios = [r["ratio"] for r in group if r["ratio"] is not None]
        first = [r["round1_ratio"] for r in group if r.get("round1_ratio") is not None]
        # the worst case: the faulty node that read fastest, the healthy one that read slowest
        pick: Callable[[list[float]], float] = max if expected in ("SLOW", "FLAGGED") else min
        out.append(
            {
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
        f"{'scenario':<13} {'mode':<8} {'expected':<9} {'as expected':>11} "
        f"{'ratio med':>9} {'worst':>6} {'r1 med':>6} {'r1 wst':>6}  statuses"
    )
    lines = [head, "-" * len(head)]
    for t in table:
        lines.append(
            f"{t['scenario']:<13} {t['mode']:<8} {t['expected']:<9} {t['as_expected']:>11} "
            f"{t['ratio_median'] if t['ratio_median'] is not None else '-':>9} "
            f"{t['ratio_worst'] if t['ratio_worst'] is not None else '-':>6} "
            f"{t.get('round1_median') if t.get('round1_median') is not None else '-':>6} "
            f"{t.get('round1_worst') if t.get('round1_worst') is not None else '-':>6}  "
            + ", ".join(f"{k} {v}" for k, v in t["statuses"].items())
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
