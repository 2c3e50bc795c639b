"""The nightly sweep on the emulated cluster: a real sbatch job holds the idle nodes, one
Slurm step probes each of them, screener-drained nodes are probed over SSH and resumed
after K passing sweeps."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from screener.probe_data import Status
from screener.store import open_store
from screener.store.slurm_records import SlurmRecords
from tests.hooked_cluster import REPO, run_screener, sinfo_nodes, write_config
from tests.test_pipeline import NOISE_SIGNALS

pytestmark = pytest.mark.cluster


def _sweep(cluster: Any, config: Path, out: Path) -> str:
    res = run_screener(
        cluster,
        config,
        "sweep",
        "--submit",
        "--wait",
        "--script",
        str(REPO / "jobs" / "sweep.sbatch"),
        cwd=out,
    )
    logs = "".join(p.read_text() for p in sorted(out.glob("slurm-*.out")))
    assert res.returncode == 0, res.stderr + logs
    return res.stderr + logs


@pytest.mark.parametrize("backend", ["cli", "pyslurm"])
def test_sweep_drains_slow_node_then_resumes_it_after_k_passes(
    cluster: Any, tmp_path: Path, backend: str
) -> None:
    """Both Slurm backends, named in the policy (issue 21)."""
    config = tmp_path / "screener.toml"
    db = f"sqlite:///{tmp_path}/screener.db"
    slurm = {"backend": backend, "partition_max_drain_fraction": 0.5}
    write_config(config, cluster, db, tmp_path / "log", sweep={"resume_after": 2}, slurm=slurm)
    slow = cluster.nodes[0]
    cluster.inject(slow, "slow_read", "20M")

    log = _sweep(cluster, config, tmp_path)
    node = sinfo_nodes(cluster)[slow]
    assert "DRAIN" in node["state_flags"] and node["reason"].startswith("screener: rd"), log
    assert "holds " in log and f"drained {slow}" in log
    assert set(re.findall(r"slurm backend (\w+)", log)) == {backend}, log
    with open_store(db) as store:
        run = store.latest_runs(1)[0]
        assert run.trigger.value == "sweep" and run.node_count == len(cluster.nodes)
        assert run.n_slow == 1 and run.n_unknown == 0
        # the fault does not spread: on this loaded 2-core host, noise may leave one healthy
        # peer DEGRADED by soft evidence only (flagged, never drained; CI on c14ec57)
        others = [v for v in store.run_verdicts(run.id) if v.node != slow]
        noisy = [v for v in others if v.status != Status.OK]
        assert len(others) == len(cluster.nodes) - 1 and len(noisy) <= 1, others
        assert all(v.status == Status.DEGRADED and set(v.signals) <= NOISE_SIGNALS for v in noisy)
        assert [n for n, i in sinfo_nodes(cluster).items() if "DRAIN" in i["state_flags"]] == [slow]
        # every held node was probed by the Slurm step on the node itself
        probes = store.run_probes(run.id)
        assert {p.node for p in probes if p.usable} == set(cluster.nodes)
        assert [e[0] for e in SlurmRecords(store).episodes(slow)] == ["sweep"]

    cluster.heal(slow)
    log = _sweep(cluster, config, tmp_path)
    assert f"screener-drained idle nodes probed over SSH: {slow}" in log
    assert f"{slow}: passed 1 of 2 sweeps; stays drained" in log
    assert "DRAIN" in sinfo_nodes(cluster)[slow]["state_flags"]

    log = _sweep(cluster, config, tmp_path)
    assert f"resumed {slow}: passed 2 consecutive sweeps" in log
    assert "DRAIN" not in sinfo_nodes(cluster)[slow]["state_flags"]
    with open_store(db) as store:
        assert [e.action for e in store.node_events(slow)] == ["resume", "drain", "drain_pending"]
        (episode,) = SlurmRecords(store).episodes(slow)
        assert episode[2] is not None  # closed at the resume


def test_sweep_with_the_database_down_spools_and_drains_nobody(
    cluster: Any, tmp_path: Path
) -> None:
    """A database that does not answer: every held node is still probed and judged, the run
    goes to the spool, and nobody is drained (the drain could never be resumed)."""
    config = tmp_path / "screener.toml"
    write_config(config, cluster, "postgresql://screener@127.0.0.1:9/none", tmp_path / "log")
    slow = cluster.nodes[0]
    cluster.inject(slow, "slow_read", "20M")
    try:
        log = _sweep(cluster, config, tmp_path)
    finally:
        cluster.heal(slow)
    assert "database unavailable (cannot connect to database" in log
    assert f"{slow}: SLOW_READ" in log and "nobody drained" in log, log
    assert "DRAIN" not in sinfo_nodes(cluster)[slow]["state_flags"]
    (spooled,) = (tmp_path / "spool").glob("run-*.jsonl")
    entries = [json.loads(line) for line in spooled.read_text().splitlines()]
    assert (entries[0]["kind"], entries[0]["trigger"]) == ("run", "sweep")
    probed = {e["probe"]["node"] for e in entries if e["kind"] == "probe"}
    assert probed == set(cluster.nodes)
    assert entries[-1]["kind"] == "finish" and entries[-1]["status"] == "done"
