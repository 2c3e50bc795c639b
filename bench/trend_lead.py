"""Early warning's lead time and false-warning rate (issue 46), on real sweeps.

On a 6-node emulated cluster whose slurmctld runs screener's hooks, SWEEPS dry-run sweeps
(`screener sweep --submit --wait --dry-run`: sbatch, a Slurm step per node, real fio; dry
runs, so the slow node stays in the sweeps) per fleet, with lean probes (0.2 s ramp + 0.5 s
per fio job: seq read and write, no random reads) and the shipped [trend] policy
(min_sweeps 6, window 12, confidence 0.9):
- node01 healthy for HEALTHY_FIRST sweeps, then its read throttle tightened by (1 - RATE)
  a sweep from its healthy rate: a slow decline, until the slow rules call it SLOW_READ;
- the other nodes healthy all along: the healthy series (SWEEPS sweeps each).
Fleets (``--fleet``, both by default, back to back in one run so their figures compare):
- paced: every device paced at 300 MB/s and 20,000 read IOPS (tests/hooked_cluster.PACE),
  node01's decline from the pace;
- mixed (issue 44): unpaced devices (healthy nodes spread with the 2 shared cores'
  contention), node04 and node05 a slower model at 0.6x the unpaced healthy median read and
  write (measured first by two calibration screens of every node, the same recipe, another
  store), node01's decline from that median.
Then each fleet's store is scored as `screener accuracy --by rule` scores it
(store/trend_outcomes.py: the trend replayed as of each sweep, no look-ahead), with the
horizon at HORIZON_SWEEPS of the run's own cadence ([trend] horizon_days 14 at one sweep
a night), and 7 and 28 sweeps beside it. Per fleet: node01's first DECLINING sweep, its
first SLOW_READ, the lead between (sweeps, seconds); over the healthy nodes, node-sweeps
with a forecast, warnings (each a false one) and DECLINING sweeps, and the rate: warnings
over the node-sweeps with a forecast (a sweep before min_sweeps cannot warn).
Writes bench/results/trend_lead.json (after each fleet) and prints the fleets side by side,
one line per horizon, and the load average at the start and at each fleet's end.

    .venv/bin/python bench/trend_lead.py [--fleet paced,mixed] [--sweeps 30] [--rate 0.94]
        [--out F]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.time_to_start import calibration_screen
from deploy.minicluster import ClusterHandle
from screener import __version__
from screener.policy import TrendPolicy, load_policy
from screener.store import open_store
from screener.store.trend import SEQ_READ, node_series
from screener.store.trend_outcomes import trend_rule, trend_scores
from screener.verdict.trend import TrendStatus
from screener.verdict.trend_score import NodeScore, Replay, summarize
from tests.hooked_cluster import (
    PACE,
    PACE_IOPS,
    REPO,
    hooked_cluster,
    pace_devices,
    run_screener,
    write_config,
)

RESULTS = Path(__file__).resolve().parent / "results" / "trend_lead.json"
NODES = 6
FLEETS = ("paced", "mixed")
DECLINER = "node01"
SLOWER = ("node04", "node05")  # the mixed fleet's slower drive model
SLOWER_FACTOR = 0.6
HEALTHY_FIRST = 6  # node01's healthy sweeps before its decline
HORIZON_SWEEPS = 14  # [trend] horizon_days 14 at one sweep a night
ALSO_HORIZONS = (7, 28)
CALIBRATIONS = 2
PROBE: dict[str, Any] = {"runtime_s": 0.5, "ramp_s": 0.2, "rand_read": False}
PACE_MB = float(PACE.rstrip("M"))


def config(cluster: ClusterHandle, d: Path, name: str) -> tuple[Path, str]:
    """The site's policy (lean probes, shipped [trend]) over a new SQLite store ``name``."""
    cfg = d / "screener.toml"
    db = f"sqlite:///{d}/{name}.db"
    write_config(cfg, cluster, db, d / f"{name}.log", probe=PROBE)
    return cfg, db


def calibrate(cluster: ClusterHandle, d: Path) -> tuple[float, float, list[float]]:
    """The unpaced healthy median read and write (MB/s) of every node by CALIBRATIONS
    screens with the bench's recipe, in a store of their own (no sweep's history)."""
    reads: list[float] = []
    writes: list[float] = []
    for k in range(CALIBRATIONS):
        cfg, _ = config(cluster, d, f"calibration-{k}")
        for n in calibration_screen(cluster, cfg, cluster.nodes):
            reads.append(n["read_mb_s"])
            writes.append(n["write_mb_s"])
    return statistics.median(reads), statistics.median(writes), sorted(reads)


def setup(cluster: ClusterHandle, d: Path, fleet: str) -> tuple[float, dict[str, Any]]:
    """Throttles of ``fleet`` on a reset cluster; node01's healthy rate (MB/s) and what was
    set."""
    cluster.reset()  # came up unpaced: nothing throttled
    if fleet == "paced":
        pace_devices(cluster, cluster.nodes)
        for n in cluster.nodes:
            cluster.inject(n, "slow_randread", PACE_IOPS)
        return PACE_MB, {"devices_paced": PACE, "pace_iops": PACE_IOPS}
    read, write, seen = calibrate(cluster, d)
    r, w = int(read * SLOWER_FACTOR * 1e6), int(write * SLOWER_FACTOR * 1e6)
    for n in SLOWER:
        cluster.inject(n, "slow_read", r)
        cluster.inject(n, "slow_write", w)
    about = {
        "devices_paced": None,
        "calibration_read_mb_s": [round(x) for x in seen],
        "healthy_median_mb_s": {"read": round(read), "write": round(write)},
        "slower_nodes": {n: {"read_mb_s": round(r / 1e6), "write_mb_s": round(w / 1e6)}
                         for n in SLOWER},
    }  # fmt: skip
    print(f"mixed fleet: unpaced healthy median read {read:,.0f} MB/s, write {write:,.0f};"
          f" {', '.join(SLOWER)} at {SLOWER_FACTOR}x", flush=True)  # fmt: skip
    return read, about


def sweep(cluster: ClusterHandle, cfg: Path, out: Path) -> float:
    """One dry-run sweep over the idle nodes, waited for; its wall (s)."""
    t0 = time.monotonic()
    res = run_screener(
        cluster, cfg, "sweep", "--submit", "--wait", "--dry-run",
        "--script", str(REPO / "jobs" / "sweep.sbatch"), cwd=out,
    )  # fmt: skip
    wall = time.monotonic() - t0
    logs = "".join(p.read_text() for p in sorted(out.glob("slurm-*.out")))
    for p in out.glob("slurm-*.out"):
        p.unlink()
    if res.returncode != 0:
        raise SystemExit(f"sweep failed: {res.stderr[-1500:]}{logs[-1500:]}")
    return wall


def run_fleet(cluster: ClusterHandle, d: Path, fleet: str, sweeps: int, rate: float) -> Any:
    """SWEEPS sweeps of ``fleet`` with node01 declining after HEALTHY_FIRST; scored."""
    load = [round(x, 1) for x in os.getloadavg()]
    base, about = setup(cluster, d, fleet)
    cfg, db = config(cluster, d, fleet)
    out = d / f"{fleet}-out"
    out.mkdir()
    rows = []
    for k in range(sweeps):
        throttle = None
        if k >= HEALTHY_FIRST:
            throttle = base * rate ** (k - HEALTHY_FIRST + 1)
            cluster.inject(DECLINER, "slow_read", int(throttle * 1e6))
        wall = sweep(cluster, cfg, out)
        with open_store(db) as store:
            run = store.latest_runs(1)[0]
            verdicts = {v.node: v for v in store.run_verdicts(run.id)}
        mine = verdicts.get(DECLINER)
        rows.append(
            {
                "sweep": k,
                "run_id": run.id,
                "started_at": run.started_at.isoformat(),
                "wall_s": round(wall, 1),
                "node01_throttle_mb_s": None if throttle is None else round(throttle, 1),
                "status": {n: v.status.value for n, v in sorted(verdicts.items())},
                "read_mb_s": {n: v.read_mb_s and round(v.read_mb_s) for n, v in verdicts.items()},
            }
        )
        cap = "-" if throttle is None else f"{throttle:,.0f}"
        said = (
            "not in the sweep"
            if mine is None
            else f"{mine.status.value} {mine.read_mb_s or 0:,.0f} MB/s (throttle {cap})"
        )
        print(f"{fleet} sweep {k}: {wall:.0f}s, node01 {said}", flush=True)
    about["load_average"] = {"start": load, "end": [round(x, 1) for x in os.getloadavg()]}
    return score(cfg, db, rows, base, about)


def healthy_record(scores: list[NodeScore]) -> dict[str, Any]:
    """The healthy nodes' false warnings: every warning on them is one."""
    judged = sum(s.judged for s in scores)
    swept = sum(s.sweeps for s in scores)
    warnings = [f for s in scores for f in s.flags]
    return {
        "nodes": len(scores),
        "node_sweeps": swept,
        "with_forecast": judged,
        "declining_sweeps": sum(s.declining for s in scores),
        "warnings": len(warnings),
        "nodes_warned": sorted({f.node for f in warnings}),
        "false_warning_rate": round(len(warnings) / judged, 4) if judged else None,
        "false_warnings_per_node_sweep": round(len(warnings) / swept, 4) if swept else None,
        "warned": [{"node": f.node, "sweep": f.sweep, "reason": f.reason} for f in warnings],
        "slow_read_onsets": [{"node": m.node, "why": m.why.value} for s in scores
                             for m in s.misses],
    }  # fmt: skip


def decliner_record(s: NodeScore, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """node01's first warning, its first SLOW_READ and the lead between (in the bench's
    sweeps, found by time: a sweep whose probe of node01 failed has no point)."""
    index = {r["started_at"]: r["sweep"] for r in rows}
    first_slow = next((r for r in rows if r["status"].get(DECLINER) == "SLOW_READ"), None)
    flag = s.flags[0] if s.flags else None
    warned = None if flag is None else index.get(flag.at.isoformat())
    lead = None if warned is None or first_slow is None else first_slow["sweep"] - warned
    lead_s = (
        None
        if flag is None or first_slow is None
        else (datetime.fromisoformat(first_slow["started_at"]) - flag.at).total_seconds()
    )
    return {
        "first_declining_sweep": warned,
        "figure": None if flag is None else flag.figure,
        "level_at_warning": None if flag is None or flag.level is None else round(flag.level, 3),
        "warning": None if flag is None else flag.reason,
        "outcome": None if flag is None else flag.outcome.value,
        "first_slow_read_sweep": None if first_slow is None else first_slow["sweep"],
        "lead_sweeps": lead,
        "lead_s": None if lead_s is None else round(lead_s),
        "lead_sweeps_scored": None if flag is None else flag.lead_sweeps,
        "missed": [{"at_sweep": index.get(m.slow_at.isoformat()), "why": m.why.value,
                    "reason": m.reason} for m in s.misses],
    }  # fmt: skip


def score(
    cfg: Path, db: str, rows: list[dict[str, Any]], base: float, about: dict[str, Any]
) -> dict[str, Any]:
    """The fleet's store scored at each horizon; node01's replay and every ratio per sweep."""
    policy = load_policy(cfg)
    times = [datetime.fromisoformat(r["started_at"]) for r in rows]
    cadence = statistics.median((b - a).total_seconds() for a, b in itertools.pairwise(times))
    since, now = times[0] - timedelta(seconds=1), times[-1]
    by_horizon: dict[str, Any] = {}
    with open_store(db) as store:
        for n in (HORIZON_SWEEPS, *ALSO_HORIZONS):
            horizon = timedelta(seconds=n * cadence)
            scores = trend_scores(store, policy, since, now, horizon)
            mine = [s for s in scores if s.node == DECLINER]
            healthy = [s for s in scores if s.node != DECLINER]
            total = summarize(scores)
            by_horizon[str(n)] = {
                "horizon_s": round(horizon.total_seconds()),
                "node01": decliner_record(mine[0], rows) if mine else None,
                "healthy": healthy_record(healthy),
                "accuracy_row": {
                    "warnings": total.warnings, "confirmed": total.confirmed,
                    "false": total.false, "pending": total.pending, "missed": total.missed,
                    "missed_why": total.missed_why, "lead_sweeps_median": total.lead_sweeps,
                },
            }  # fmt: skip
        series = {s.node: s.points for s in node_series(store, None, since)}
    rule = trend_rule(policy, timedelta(seconds=HORIZON_SWEEPS * cadence))
    replay = Replay(DECLINER, series.get(DECLINER, {}), rule)
    ratio = {
        n: {p.run_id: round(p.ratio, 3) for p in pts.get(SEQ_READ, [])} for n, pts in series.items()
    }
    at = {t.isoformat(): i for i, t in enumerate(replay.times)}
    for r in rows:
        r["seq_read_x_peers"] = {n: ratio[n].get(r["run_id"]) for n in sorted(ratio)}
        i = at.get(r["started_at"])
        said = [] if i is None else replay[i]
        r["node01_trend"] = {v.figure: v.status.value for v in said}
    healthy_ratios = [x for n, byrun in ratio.items() if n != DECLINER for x in byrun.values()]
    return {
        **about,
        "node01_healthy_mb_s": round(base),
        "sweeps": len(rows),
        "cadence_s": round(cadence, 1),
        "sweep_wall_s_median": statistics.median(r["wall_s"] for r in rows),
        "healthy_seq_read_x_peers": {
            "min": min(healthy_ratios, default=None),
            "max": max(healthy_ratios, default=None),
        },
        "by_horizon_sweeps": by_horizon,
        "rows": rows,
        "trend_status_counts": _counts(replay),
    }


def _counts(replay: Replay) -> dict[str, int]:
    out: dict[str, int] = {s.value: 0 for s in TrendStatus}
    for i in range(len(replay)):
        for v in replay[i]:
            out[v.status.value] += 1
    return out


def render(fleets: dict[str, Any]) -> list[str]:
    """The fleets side by side, one line per horizon (the main one first): node01's first
    DECLINING sweep, figure and level, first SLOW_READ, lead; the healthy nodes' record."""
    lines = [
        f"{'fleet':<6} {'horizon':>7} {'warned':>6} {'figure':>9} {'level':>5} {'SLOW':>4}"
        f" {'lead':>4} {'lead s':>6} {'outcome':>9} | {'healthy':>7} {'forecast':>8}"
        f" {'DECLINING':>9} {'warnings':>8} {'rate':>5}"
    ]
    for name, f in fleets.items():
        for n, h in f["by_horizon_sweeps"].items():
            d, ok = h["node01"] or {}, h["healthy"]
            lines.append(
                f"{name:<6} {n + ' sw':>7} {_s(d.get('first_declining_sweep')):>6}"
                f" {_s(d.get('figure')):>9} {_s(d.get('level_at_warning')):>5}"
                f" {_s(d.get('first_slow_read_sweep')):>4} {_s(d.get('lead_sweeps')):>4}"
                f" {_s(d.get('lead_s')):>6} {_s(d.get('outcome')):>9} |"
                f" {ok['node_sweeps']:>7} {ok['with_forecast']:>8} {ok['declining_sweeps']:>9}"
                f" {ok['warnings']:>8} {_s(ok['false_warning_rate']):>5}"
            )
        load = f["load_average"]
        lines.append(
            f"{name:<6} cadence {f['cadence_s']:.1f} s, sweep wall median"
            f" {f['sweep_wall_s_median']} s, load average {load['start']} -> {load['end']}"
        )
    return lines


def _s(v: object) -> str:
    return "-" if v is None else str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleet", default=",".join(FLEETS), help="paced, mixed (both by default)")
    ap.add_argument("--sweeps", type=int, default=30, help="sweeps per fleet (default 30)")
    ap.add_argument("--rate", type=float, default=0.94, help="node01's throttle per sweep")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    fleets = [f for f in args.fleet.split(",") if f]
    if not fleets or not set(fleets) <= set(FLEETS):
        raise SystemExit(f"--fleet: {', '.join(FLEETS)}, not {args.fleet!r}")
    if args.sweeps <= HEALTHY_FIRST or not 0 < args.rate < 1:  # a short run: a smoke test
        raise SystemExit(f"--sweeps > {HEALTHY_FIRST} and 0 < --rate < 1")
    tp = TrendPolicy()
    doc: dict[str, Any] = {
        "benchmark": "trend_lead",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["bench/trend_lead.py", *sys.argv[1:]]),
        "screener": __version__,
        "cores": os.cpu_count(),
        "cluster_nodes": NODES,
        "probe": PROBE,
        "trend_policy": f"shipped [trend]: min_sweeps {tp.min_sweeps}, window {tp.window},"
        f" confidence {tp.confidence}, since_days {tp.since_days:g}",
        "horizon": f"{HORIZON_SWEEPS} sweeps of the run's cadence (main), also {ALSO_HORIZONS}",
        "decline": f"{DECLINER} healthy {HEALTHY_FIRST} sweeps, then read throttle x{args.rate}"
        " a sweep from its healthy rate",
        "load_average_at_start": [round(x, 1) for x in os.getloadavg()],
        "fleets": {},
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cfg = d / "screener.toml"
        cfg.write_text("")
        # up unpaced: the paced fleet is set by the same throttles `up --pace` sets
        for cluster in hooked_cluster(d, cfg, nodes=NODES, paced=False):
            for fleet in fleets:  # back to back: both fleets' figures from one run
                doc["fleets"][fleet] = run_fleet(cluster, d, fleet, args.sweeps, args.rate)
                doc["wall_s"] = round(time.monotonic() - started)
                doc["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
                args.out.parent.mkdir(exist_ok=True)
                args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for line in render(doc["fleets"]):
        print(line)
    print(f"{doc['wall_s']} s; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
