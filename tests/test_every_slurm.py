"""An admin's week, end to end, on whichever Slurm the suite runs (issue 43): `make test`
runs this file on the host's 22.05 with the rest, then again on 24.11 and 26.05 beside the
Slurm contract (SCREENER_TEST_SLURM; the Makefile's VERSION_TESTS).

One hooked cluster, the hooks in process as docs/slurm.md deploys them: a slow reader is
drained by the PrologSlurmctld and the job requeued onto healthy nodes; resumed by hand while
still slow, it is drained again by the next job that gets it (the second offence); healed,
the nightly sweep (a real sbatch job) resumes it, and only it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.minicluster import ClusterHandle
from screener.store import open_store
from screener.store.slurm_records import SlurmRecords
from tests.hooked_cluster import (
    REPO,
    SLURM_UNDER_TEST,
    module_cluster,
    run_screener,
    sbatch,
    sinfo_nodes,
    site_info,
    wait_for,
    wait_job,
)

pytestmark = pytest.mark.cluster

SLOW = "20M"  # 1/15 of the paced healthy nodes (300M)
ADMIN = "admin: fan swap"  # a drain screener did not make: never resumed, never overwritten


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    yield from module_cluster(tmp_path_factory, "every-slurm", 5)


def _screened_on(site: dict[str, Any], nodes: int) -> tuple[str, set[str], str]:
    """A screened ``nodes``-node job run to its end: (job id, the hosts it ran on, the log)."""
    cluster = site["cluster"]
    out = site["out"] / "hosts-%j.txt"
    job_id = sbatch(
        cluster, "-N", str(nodes), "-o", str(out), "--comment", "screener=on",
        "--wrap", "srun hostname",
    )  # fmt: skip
    job = wait_job(cluster, job_id)
    log = site["log"].read_text()
    assert job["job_state"] == "COMPLETED", log
    assert job["restart_cnt"] >= 1, log  # requeued by the failing prolog
    hosts = set((site["out"] / f"hosts-{job_id}.txt").read_text().split())
    assert len(hosts) == nodes, (hosts, log)
    return job_id, hosts, log


def _idle(cluster: ClusterHandle, node: str) -> bool:
    """Schedulable: idle, neither drained nor marked not responding."""
    info = sinfo_nodes(cluster)[node]
    return bool(
        info["state"] == "idle" and not set(info["state_flags"]) & {"DRAIN", "NOT_RESPONDING"}
    )


def _sweep(site: dict[str, Any]) -> str:
    """`screener sweep --submit --wait` (the nightly job); the submitting host's log."""
    res = run_screener(
        site["cluster"], site["config"], "sweep", "--submit", "--wait",
        "--script", str(REPO / "jobs" / "sweep.sbatch"), cwd=site["out"],
    )  # fmt: skip
    jobs = "".join(p.read_text() for p in sorted(site["out"].glob("slurm-*.out")))
    assert res.returncode == 0, res.stderr + jobs
    return res.stderr + jobs


def test_drain_requeue_second_offence_and_the_sweep_resume(
    hooked: tuple[ClusterHandle, Path], tmp_path: Path
) -> None:
    cluster, d = hooked
    site = site_info(
        cluster, d, tmp_path,
        slurm={"partition_max_drain_fraction": 0.5, "max_drain_fraction": 0.5},
        sweep={"resume_after": 1, "triage_reads": 1},
    )  # fmt: skip
    slow, other = cluster.nodes[0], cluster.nodes[4]
    # select/linear allocates the lowest idle nodes first: node01 is in every 3-node job
    cluster.inject(slow, "slow_read", SLOW)
    cluster.slurm("scontrol", "update", f"nodename={other}", "state=drain", f"reason={ADMIN}")
    try:
        first, hosts, log = _screened_on(site, 3)
        assert slow not in hosts, log
        reason = sinfo_nodes(cluster)[slow]["reason"]
        assert reason.startswith("screener: rd "), reason
        assert f"job {first}: exit 1 so Slurm requeues it" in log, log
        # the backend `auto` chose, and why, is the prolog's first word on Slurm
        assert re.search(r"slurm backend (cli|pyslurm|rest)", log), log

        # resumed by hand while still slow: the next job that gets it drains it again
        res = run_screener(cluster, site["config"], "resume", slow)
        assert res.returncode == 0, res.stderr
        # slurmctld marks a resumed node NOT_RESPONDING until its slurmd's next ping (~2 s):
        # a job submitted meanwhile would be given the healthy ones
        wait_for(f"{slow} idle after the resume", lambda: _idle(cluster, slow), 60)
        second, hosts, log = _screened_on(site, 3)
        assert slow not in hosts, log
        assert log.count(f"drained {slow}: screener: rd ") == 2, log
        assert "DRAIN" in sinfo_nodes(cluster)[slow]["state_flags"]

        # healed: the sweep probes the screener-drained node and resumes it; the admin's
        # drain stays as the admin left it
        cluster.heal(slow)
        swept = _sweep(site)
        assert f"resumed {slow}" in swept, swept
        # the learning read of the triage's recipe (`probe --local --triage 1`) ran on this
        # Slurm: each node read (figures, not "no figures"), but 3 held nodes are under
        # min_peers and the store has no fleet figures of that recipe, so none is placed
        # among peers, and none is kept (sweep/learn.py: a read it cannot place is not learned)
        said = "the sweep's short read 1 of 1 not kept as history: no peer median to place it"
        assert swept.count(said) == 3 and "no figures" not in swept, swept
        assert "learning reads done in" in swept, swept
        nodes = sinfo_nodes(cluster)
        assert "DRAIN" not in nodes[slow]["state_flags"], swept
        assert "DRAIN" in nodes[other]["state_flags"] and nodes[other]["reason"] == ADMIN
        with open_store(site["db"]) as store:
            records = SlurmRecords(store)
            episodes = records.episodes(slow)
            assert [(e[0], e[3]) for e in episodes] == [("prolog", first), ("prolog", second)]
            assert all(e[2] is not None for e in episodes)  # both closed
            assert not records.episodes(other)
    finally:
        cluster.slurm("scontrol", "update", f"nodename={other}", "state=resume")


def test_the_slurm_under_test_is_the_one_asked_for(hooked: tuple[ClusterHandle, Path]) -> None:
    """SCREENER_TEST_SLURM reached the daemons: a run that silently fell back to the host's
    22.05 would pass every test above and prove nothing about 24.11 or 26.05."""
    cluster, _ = hooked
    want = SLURM_UNDER_TEST or "22.05"
    shown = cluster.slurm("scontrol", "-V").stdout.split()[-1]  # "slurm 24.11.5"
    assert shown.startswith(want + "."), shown
    conf = cluster.slurm("scontrol", "show", "config").stdout
    assert re.search(rf"SLURM_VERSION\s*=\s*{re.escape(want)}\.", conf), conf[:400]
