"""Shared session fixtures: one emulated cluster per test session (deploy/minicluster).

    def test_x(cluster):                      # marked `cluster` automatically
        cluster.ssh("node01", "hostname")     # real ssh, strict host keys
        cluster.inject("node02", "slow_read", "20M")   # healed after the test

Env: SCREENER_TEST_NODES (default 6), SCREENER_SKIP_CLUSTER=1 to skip instead of failing
on a machine that cannot run the cluster.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `deploy` is not an installed package; tests import it
    sys.path.insert(0, str(REPO))

from deploy.minicluster import Cluster, ClusterError, ClusterHandle, preflight  # noqa: E402
from deploy.minicluster.slots import claim_slot  # noqa: E402
from tests.hooked_cluster import PACE, PACE_IOPS, slurm_version_under_test  # noqa: E402

_ACTIVE: list[ClusterHandle] = []  # the session cluster, once it is up

# The CLI prints piped tables 200 columns wide unless COLUMNS names a width; pytest-xdist's
# workers inherit COLUMNS=80 from the runner's terminal, which wraps words the tests read.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the cluster fixture carries the `cluster` marker, so
    `-m "not cluster"` deselects it even if its author forgot the decorator."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    # Tests that remove machine state (e.g. /run/sshd) run before any session cluster is up.
    # Then the longest modules (LONGEST), the other modules with cluster tests, the rest:
    # on xdist workers (`make test`, a file per worker in this order) the long files start
    # first and the short ones fill in at the end, instead of a long file starting last.
    # Order only: a stale list costs minutes, never a result.
    heavy = {item.path.name for item in items if item.get_closest_marker("cluster")}

    def rank(item: pytest.Item) -> tuple[bool, int]:
        name = item.path.name
        first = item.get_closest_marker("fresh_machine") is None
        if name in LONGEST:
            return first, LONGEST.index(name)
        return first, len(LONGEST) + (name not in heavy)

    items.sort(key=rank)


# The longest test modules, longest first (`make test` passes --no-loadscope-reorder, else
# xdist reorders files by their number of tests and the long cluster files start last).
# Seconds in one 3-worker fresh-clone run on this 2-core machine (2026-12-03, junit times,
# hooked clusters through their own hookd): 269, 259 (one test of 215 s), 232, 190, 190,
# 178, 158, 146, 141, 137, 128, 106, 104, 100, 95, 89, 80, 76.
LONGEST = (
    "test_trend_cluster.py",
    "test_sweep_mode.py",
    "test_prolog.py",
    "test_hookd.py",
    "test_small_jobs_cluster.py",
    "test_guard_cluster.py",
    "test_concurrency.py",
    "test_pipeline_hold.py",
    "test_ingest_hooked.py",
    "test_hostile_input.py",
    "test_sentinel_cluster.py",
    "test_fuzz_parsers.py",
    "test_sweep.py",
    "test_prolog_failopen.py",
    "test_outage_cluster.py",
    "test_slurm_contract.py",
    "test_pipeline.py",
    "test_every_slurm.py",
)


def _test_nodes() -> int:
    raw = os.environ.get("SCREENER_TEST_NODES", "6")
    if not raw.isdigit() or not 1 <= int(raw) <= 99:
        pytest.fail(f"SCREENER_TEST_NODES must be 1..99, got {raw!r}", pytrace=False)
    return int(raw)


@pytest.fixture(scope="session")
def cluster() -> Iterator[ClusterHandle]:
    """An emulated Slurm cluster for the whole session, in its own slot (state dir, subnet,
    ports), torn down at the end even when tests fail."""
    if os.environ.get("SCREENER_SKIP_CLUSTER") == "1":
        pytest.skip("SCREENER_SKIP_CLUSTER=1: emulated cluster disabled")
    nodes = _test_nodes()
    try:
        preflight.check()
    except ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    with claim_slot() as slot:
        mc = Cluster(slot.state_dir)
        try:
            info = mc.up(
                nodes,
                subnet=slot.subnet,
                slurm_port_base=slot.slurm_port_base,
                slurm_version=slurm_version_under_test(),  # SCREENER_TEST_SLURM
                # every device at one pace, as on the hooked clusters: healthy nodes read
                # alike, and a probe waits on its device, not on the 2 shared cores (unpaced,
                # test_pipeline + test_concurrency + test_cli cost 286 CPU s, paced 164)
                pace=PACE,
                pace_iops=PACE_IOPS,
            )
        except ClusterError as exc:
            mc.down()
            pytest.fail(f"cannot bring the test cluster up: {exc}", pytrace=False)
        handle = ClusterHandle(mc, info)
        _ACTIVE.append(handle)
        try:
            yield handle
        finally:
            _ACTIVE.remove(handle)
            mc.down()


@pytest.fixture(autouse=True)
def _reset_cluster_after_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the cluster: heal every fault, restart dead daemons, cancel
    leftover jobs and resume drained nodes, so tests stay independent."""
    yield
    if "cluster" in request.fixturenames and _ACTIVE:
        _ACTIVE[-1].reset()
