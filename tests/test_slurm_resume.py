"""Resume safety and the screen deadline on the emulated cluster (real Slurm, sshd, fio).

screener resumes only a drain whose *current* Slurm reason is exactly the one it recorded:
an admin's drain, or a screener drain whose reason an admin has since rewritten, stays.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from screener.probe_data import Trigger
from screener.store import open_store
from tests.hooked_cluster import (
    PYSLURM_NEEDS_HOST_SLURM,
    run_screener,
    sinfo_nodes,
    write_config,
)

pytestmark = pytest.mark.cluster


def _setup(cluster: Any, tmp_path: Path, backend: str = "auto") -> tuple[Path, str]:
    config = tmp_path / "screener.toml"
    db = f"sqlite:///{tmp_path}/screener.db"
    slurm = {"backend": backend, "partition_max_drain_fraction": 0.5}
    write_config(config, cluster, db, tmp_path / "log", slurm=slurm)
    return config, db


def _screener_drain(cluster: Any, db: str, node: str, reason: str) -> None:
    """A drain as the prolog makes it: scontrol with the reason, the event with the reason."""
    cluster.slurm("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}")
    with open_store(db, upgrade=True) as store:
        run = store.start_run(Trigger.PROLOG, [node], {}, "7", node, datetime.now(UTC))
        store.record_event(node, "drain", reason, datetime.now(UTC), run, reason)


@pytest.mark.parametrize(
    "backend", ["cli", pytest.param("pyslurm", marks=PYSLURM_NEEDS_HOST_SLURM)]
)
def test_resume_only_screener_drains_with_unchanged_reason(
    cluster: Any, tmp_path: Path, backend: str
) -> None:
    """Both Slurm backends, named in the policy (issue 21)."""
    config, db = _setup(cluster, tmp_path, backend)
    ours, rewritten, admin = cluster.nodes[:3]
    _screener_drain(cluster, db, ours, "screener: rd 0.05x peers r1")
    _screener_drain(cluster, db, rewritten, "screener: rd 0.04x peers r1")
    cluster.slurm(
        "scontrol", "update", f"nodename={rewritten}", "state=drain", "reason=RMA ticket 42"
    )
    cluster.slurm("scontrol", "update", f"nodename={admin}", "state=drain", "reason=admin: bios")

    res = run_screener(cluster, config, "resume", f"{ours},{rewritten},{admin}")
    assert res.returncode == 1, res.stderr  # not everything could be resumed
    states = sinfo_nodes(cluster)
    assert "DRAIN" not in states[ours]["state_flags"]
    assert states[rewritten]["reason"] == "RMA ticket 42"
    assert "DRAIN" in states[rewritten]["state_flags"]
    assert states[admin]["reason"] == "admin: bios" and "DRAIN" in states[admin]["state_flags"]
    assert "not screener's" in res.stderr and "no drain on record" in res.stderr
    assert set(re.findall(r"slurm backend (\w+)", res.stderr)) == {backend}, res.stderr
    with open_store(db) as store:
        assert [e.action for e in store.node_events(ours)] == ["resume", "drain"]
        assert [e.action for e in store.node_events(rewritten)] == ["resume_refused", "drain"]
        assert store.node_events(admin) == []


def test_resume_dry_run_touches_nothing(cluster: Any, tmp_path: Path) -> None:
    config, db = _setup(cluster, tmp_path)
    node = cluster.nodes[0]
    _screener_drain(cluster, db, node, "screener: rd 0.05x peers r9")
    res = run_screener(cluster, config, "resume", node, "--dry-run")
    assert res.returncode == 0 and "dry-run: would resume" in res.stderr
    assert sinfo_nodes(cluster)[node]["reason"] == "screener: rd 0.05x peers r9"


def test_screen_deadline_leaves_unfinished_nodes_unknown(cluster: Any, tmp_path: Path) -> None:
    config, _ = _setup(cluster, tmp_path)
    slow = cluster.nodes[1]
    # 1 MB/s: fio's 32 queued 1 MiB reads alone take ~30 s to drain after its runtime ends
    cluster.inject(slow, "slow_read", "1M")
    nodes = ",".join(cluster.nodes[:4])
    res = run_screener(cluster, config, "screen", nodes, "--deadline", "12", "--json", "--no-store")
    doc = json.loads(res.stdout)
    got = {n["node"]: n for n in doc["nodes"]}
    assert got[slow]["status"] == "UNKNOWN" and "deadline" in got[slow]["reason"], got[slow]
    assert doc["wall_s"] < 12 + 5  # decided at the deadline, not when the slow node finished
    assert all(n["status"] in ("OK", "UNKNOWN") for n in doc["nodes"]), doc  # never SLOW


def test_deadline_must_be_positive(cluster: Any, tmp_path: Path) -> None:
    config, _ = _setup(cluster, tmp_path)
    res = run_screener(cluster, config, "screen", cluster.nodes[0], "--deadline", "0")
    assert res.returncode == 1 and res.stderr.strip() == (
        "screener: error: --deadline must be > 0 and <= 86400 seconds"
    )
