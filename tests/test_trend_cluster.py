"""Early warning on the emulated cluster (issue 46): real dry-run sweeps (sbatch, a Slurm step
per node, real fio on paced loop devices), read back as each admin would after every sweep.

- one node's read throttle tightens 8 % a sweep: DECLINING while it still reads above the
  slow line, at least 3 sweeps before its first SLOW verdict; nobody else ever flagged;
- every node tightened together: the round's peer median falls with them, nobody flagged.
Dry runs: a trend never drains, and a drained node would leave the sweep's job.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle
from screener.policy import load_policy
from screener.probe_data import Status
from screener.store import open_store
from screener.store.trend import PROBE_FIGURES, READ_P99, SEQ_READ, STALL_SHARE, node_trends
from screener.verdict.trend import TrendStatus
from tests.hooked_cluster import PACE, REPO, module_cluster, run_screener, site_info

pytestmark = pytest.mark.cluster

SHORT = {"runtime_s": 0.5, "ramp_s": 0.2, "rand_read": False}  # lean probes: seq read only
PACE_MB = int(PACE.rstrip("M"))
HORIZON = timedelta(minutes=10)  # sweeps seconds apart: ~14 days' worth of nightly ones
WALL: dict[str, float] = {}
WARNS = (SEQ_READ, READ_P99, STALL_SHARE)  # what a tightening read throttle moves


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    yield from module_cluster(tmp_path_factory, "trend", nodes=6)


@pytest.fixture()
def site(hooked: tuple[ClusterHandle, Path], tmp_path: Path) -> Iterator[dict[str, Any]]:
    cluster, d = hooked
    yield site_info(cluster, d, tmp_path, probe=SHORT, trend={"min_sweeps": 5})
    cluster.reset()


def _sweep(site: dict[str, Any]) -> None:
    """One dry-run sweep over the idle nodes, waited for."""
    res = run_screener(
        site["cluster"],
        site["config"],
        "sweep",
        "--submit",
        "--wait",
        "--dry-run",
        "--script",
        str(REPO / "jobs" / "sweep.sbatch"),
        cwd=site["out"],
    )
    logs = "".join(p.read_text() for p in sorted(site["out"].glob("slurm-*.out")))
    for p in site["out"].glob("slurm-*.out"):
        p.unlink()
    assert res.returncode == 0, res.stderr + logs


def _after_sweep(site: dict[str, Any], node: str) -> tuple[Status, list[Any]]:
    """The node's verdict in the newest run, and every DECLINING trend verdict now."""
    policy = load_policy(site["config"])
    with open_store(site["db"]) as store:
        run = store.latest_runs(1)[0]
        (verdict,) = [v for v in store.run_verdicts(run.id) if v.node == node]
        trends = node_trends(store, policy, datetime.now(UTC), None, HORIZON)
    return verdict.status, trends


def test_a_tightening_node_is_declining_sweeps_before_it_is_slow(site: dict[str, Any]) -> None:
    cluster = site["cluster"]
    node = cluster.nodes[0]
    started = time.monotonic()
    first_declining: int | None = None
    first_slow: int | None = None
    history = []
    for k in range(12):
        cluster.inject(node, "slow_read", f"{int(PACE_MB * 0.92**k)}M")
        _sweep(site)
        status, trends = _after_sweep(site, node)
        flagged = [v for v in trends if v.status is TrendStatus.DECLINING]
        history.append((k, status.value, [v.reason for v in flagged]))
        # its read and the read's tail (p99, slow-read share) may warn; nothing else may
        assert all(v.node == node and v.figure in WARNS for v in flagged), history
        if flagged and first_declining is None:
            first_declining = k
            seq = [v for v in flagged if v.figure == SEQ_READ]
            assert all(v.level is not None and v.level > 0.5 for v in seq), history
            assert status not in (Status.SLOW_READ, Status.SLOW_WRITE), history
        if status is Status.SLOW_READ:
            first_slow = k
            break
    WALL["declining"] = time.monotonic() - started
    assert first_declining is not None and first_slow is not None, history
    assert first_slow - first_declining >= 3, history
    # the admin's view of the same store: the CLI names it, with its forecast in words
    res = run_screener(cluster, site["config"], "trend", "--json", "--horizon", "10m")
    assert res.returncode == 0, res.stderr
    rows = {(r["node"], r["figure"]): r for r in json.loads(res.stdout)}
    # seq read of every node; no random reads in SHORT, no SMART on loop devices
    assert {(n, SEQ_READ) for n in cluster.nodes} <= set(rows), rows
    assert {f for _, f in rows} <= set(PROBE_FIGURES) - {"rand read"}, rows
    assert rows[(node, SEQ_READ)]["status"] in ("DECLINING", "BELOW"), rows[(node, SEQ_READ)]
    # the others: no fall beyond the noise (a tail figure may have too few usable sweeps)
    others = [r for (n, _), r in rows.items() if n != node]
    assert all(r["status"] in ("STEADY", "TOO_FEW") for r in others), rows
    print(f"declining node: {len(history)} sweeps in {WALL['declining']:.0f} s: {history}")


def test_a_fleet_wide_tightening_flags_nobody(site: dict[str, Any]) -> None:
    cluster = site["cluster"]
    started = time.monotonic()
    history = []
    for k in range(6):
        for n in cluster.nodes:
            cluster.inject(n, "slow_read", f"{int(PACE_MB * 0.9**k)}M")
        _sweep(site)
        _, trends = _after_sweep(site, cluster.nodes[0])
        history.append((k, [v.reason for v in trends if v.status is not TrendStatus.STEADY]))
        assert not [v for v in trends if v.status is TrendStatus.DECLINING], history
    WALL["fleet"] = time.monotonic() - started
    with open_store(site["db"]) as store:
        trends = node_trends(store, load_policy(site["config"]), datetime.now(UTC), None, HORIZON)
    seq = [v for v in trends if v.figure == SEQ_READ]
    assert len(seq) == len(cluster.nodes) and all(v.sweeps == 6 for v in seq), trends
    assert all(v.status is TrendStatus.STEADY for v in seq), [v.reason for v in trends]
    assert not [v for v in trends if v.status is TrendStatus.DECLINING], trends
    print(f"fleet-wide: 6 sweeps in {WALL['fleet']:.0f} s: {history}")
