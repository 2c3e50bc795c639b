"""Issue 45 under a burst of real prologs (real Slurm, sshd, fio; private PostgreSQL
clusters, never the shared server): (a) a failover in the middle of the burst, the store
URL multi-host, stores every prolog's run exactly once (directly, completed by replay, or
replayed); (b) a server with few free connections: every hook ends inside its budget and
every run is stored, directly or by replay.

One 6-node cluster for the module: select/linear gives each one-node job a whole node, so
at most 6 prologs run at once; a burst is 12 jobs, two waves of 6. 32 at once would need 32
emulated nodes (each with sshd and fio) on the 2-core test machine; 6 contenders for one
free connection press the pool as hard as 32 for 8."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from deploy.minicluster import ClusterHandle
from tests.hooked_cluster import (
    module_cluster,
    run_screener,
    sbatch,
    wait_for,
    wait_job,
    write_config,
)
from tests.pg_private import PgCluster, private_cluster, standby_of

pytestmark = pytest.mark.cluster

BURST = 12  # one-node screened jobs submitted at once: two waves over the 6 nodes
SCREENING = re.compile(r"job (\d+) \(.*\) on \S+: screening \(")
MAY_START = re.compile(r"job (\d+): may start \((\d+\.\d+)s\)")
# A hook that gave up on its job (anything but the spool's "results spooled to ...; fail
# open: the job runs, nobody drained" after a screen whose run went to the spool).
GAVE_UP = re.compile(r"job \d+: (?!database unavailable \().*; fail open|internal error")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterHandle, Path]]:
    yield from module_cluster(tmp_path_factory, "burst", 6)


def _configure(cluster: ClusterHandle, d: Path, url: str, log: Path, budget_s: float) -> Path:
    config = d / "screener.toml"
    write_config(
        config,
        cluster,
        url,
        log,
        prolog={"fresh_s": 0.0, "budget_s": budget_s},  # every job's node is probed
        verdict={"shadow": ["stalls"]},  # a CPU hiccup's lone stall does not drain here
    )
    up = run_screener(cluster, config, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    return config


def _burst(cluster: ClusterHandle, out: Path) -> list[str]:
    argv = ["-N", "1", "--comment", "screener=on", "-o", str(out / "j.%j"), "--wrap", "true"]
    return [sbatch(cluster, *argv) for _ in range(BURST)]


def _prolog_tags(pg: PgCluster) -> dict[str, int]:
    """Rows of ``runs`` per run tag, of prolog runs."""
    sql = b"SELECT policy->>'run_tag', count(*) FROM runs WHERE trigger = 'prolog' GROUP BY 1"
    with pg.connect() as conn:
        return {str(r[0]): int(str(r[1])) for r in conn.execute(sql).fetchall()}


def _replay_rest(cluster: ClusterHandle, config: Path, spool_dir: Path) -> None:
    """What the hooks left in the spool (a run still live when they looked), replayed."""
    done = run_screener(cluster, config, "spool", "replay")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(spool_dir.glob("run-*")), list(spool_dir.iterdir())


def test_a_failover_in_a_burst_stores_every_prolog_run_once(
    site: tuple[ClusterHandle, Path], tmp_path: Path
) -> None:
    cluster, d = site
    log_path, spool_dir = tmp_path / "hook.log", d / "spool"
    with private_cluster("burst_fo") as pg, standby_of(pg, "burst_fo_sb") as sb:
        url = (
            f"postgresql+psycopg://postgres@/test?host={pg.host}&host={sb.host}"
            "&target_session_attrs=read-write"
        )
        config = _configure(cluster, d, url, log_path, budget_s=60.0)
        try:
            jobs = _burst(cluster, tmp_path)
            wait_for(
                "the first prolog",
                lambda: log_path.exists() and "screening (" in log_path.read_text(),
            )
            pg.stop()  # mid-burst: sessions cut, as a failover manager does
            sb.promote()
            states = {j: wait_job(cluster, j)["job_state"] for j in jobs}
            log = log_path.read_text()
            assert set(states.values()) == {"COMPLETED"}, (states, log)
            _replay_rest(cluster, config, spool_dir)
            screened = SCREENING.findall(log)
            tags = _prolog_tags(sb)
            assert tags == dict.fromkeys(tags, 1), tags  # never a second row of one run
            assert len(tags) == len(screened), (len(tags), len(screened), log)
            spooled = log.count("database unavailable") + log.count("results spooled to")
            print(f"failover burst: {len(screened)} prolog runs, each stored once; "
                  f"{spooled} spool lines in the hook log")  # fmt: skip
        finally:
            cluster.reset()


def test_few_free_connections_every_hook_in_budget_every_run_stored(
    site: tuple[ClusterHandle, Path], tmp_path: Path
) -> None:
    cluster, d = site
    log_path, spool_dir, budget = tmp_path / "hook.log", d / "spool", 20.0
    settings = {"max_connections": "8", "superuser_reserved_connections": "0"}
    with private_cluster("burst_few", **settings) as pg:
        config = _configure(cluster, d, pg.url, log_path, budget_s=budget)
        try:
            with ExitStack() as held:
                for _ in range(7):  # other clients hold 7 of 8: one left for the burst
                    held.enter_context(pg.connect())
                jobs = _burst(cluster, tmp_path)
                states = {j: wait_job(cluster, j)["job_state"] for j in jobs}
            log = log_path.read_text()
            assert set(states.values()) == {"COMPLETED"}, (states, log)
            screened = {j for (j,) in map(lambda m: (m,), SCREENING.findall(log))}
            took = {j: float(s) for j, s in MAY_START.findall(log)}
            assert screened == set(jobs) and set(took) == set(jobs), log
            assert max(took.values()) <= budget, took  # every hook ended inside its budget
            assert not GAVE_UP.search(log), log
            _replay_rest(cluster, config, spool_dir)
            tags = _prolog_tags(pg)
            assert tags == dict.fromkeys(tags, 1) and len(tags) == len(jobs), (tags, log)
            spooled = log.count("database unavailable")
            print(f"1 free connection: {len(jobs)} prologs, longest {max(took.values()):.2f} s "
                  f"of a {budget:g} s budget, {spooled} spooled, all stored once")  # fmt: skip
        finally:
            cluster.reset()
