"""A cluster whose slurmctld runs screener's PrologSlurmctld/EpilogSlurmctld (jobs/), for the
prolog, epilog and sweep tests; plus helpers to submit jobs and wait for them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from deploy.minicluster import Cluster, ClusterError, ClusterHandle
from deploy.minicluster.procs import wait_until
from deploy.minicluster.slots import claim_slot
from deploy.minicluster.spec import slurm_version_arg
from screener.slurm.parse import job_state as one_word_state

REPO = Path(__file__).resolve().parents[1]
SCREENER = REPO / ".venv" / "bin" / "screener"
T = TypeVar("T")
# Slurm job states of a job that has not finished yet
ACTIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED"})


def slurm_version_under_test() -> str | None:
    """The Slurm every test cluster runs (the session's and the hooked ones): the one place
    SCREENER_TEST_SLURM is read. 24.11, 26.05: that release from its deploy/slurmroot root
    (built by `make slurm-root SLURM=V`; missing, `up` fails saying so); unset, empty or
    22.05: the host's."""
    return slurm_version_arg(os.environ.get("SCREENER_TEST_SLURM"))


SLURM_UNDER_TEST = slurm_version_under_test()
# pyslurm 22.5.3 links libslurm.so.38 (Slurm 22.05), which no other root has (ImportError
# inside it), and a host-side pyslurm would speak 22.05's protocol to a newer slurmctld: a test
# that runs screener on the host has no pyslurm for another Slurm.
PYSLURM_NEEDS_HOST_SLURM = pytest.mark.skipif(
    SLURM_UNDER_TEST is not None,
    reason=f"SCREENER_TEST_SLURM={SLURM_UNDER_TEST}: this test runs screener on the host, whose "
    "pyslurm 22.5.3 serves only Slurm 22.05 (the root's own build runs inside the root: "
    "tests/test_slurm_contract.py)",
)


def pyslurm_in_root_missing() -> str | None:
    """Why pyslurm cannot serve the Slurm under test from inside its root (None: it can).

    The root's own build (deploy/slurmroot/pyslurm.py, `make pyslurm SLURM=V`) is imported
    by a venv python run inside the root (in_slurm_root), as the hooks are; 26.05 has none."""
    if SLURM_UNDER_TEST is None:
        return "the host's Slurm: pyslurm runs on the host"
    from deploy.slurmroot import SlurmRootError
    from deploy.slurmroot.pyslurm import find_pyslurm

    try:
        find_pyslurm(SLURM_UNDER_TEST)
    except SlurmRootError as exc:
        return f"SCREENER_TEST_SLURM={SLURM_UNDER_TEST}: {exc}"
    return None


def in_slurm_root(argv: list[str]) -> list[str]:
    """``argv`` run with the /usr of the Slurm root under test, as slurmctld runs the hooks
    (there the venv's .pth puts the root's pyslurm first); unchanged on the host's Slurm."""
    if SLURM_UNDER_TEST is None:
        return argv
    from deploy.slurmroot import exec_argv, root_path

    return exec_argv(root_path(SLURM_UNDER_TEST), argv)


def hook_script(directory: Path, hook: str, config: Path, hookd: str = "off") -> Path:
    """A site wrapper as docs/slurm.md describes: sets SCREENER_CONFIG/BIN, runs jobs/<hook>.
    ``hookd`` is the `screener hookd` socket ("off": run in process, whatever /run holds)."""
    path = directory / f"{hook}.sh"
    path.write_text(
        "#!/bin/sh\n"
        f"SCREENER_CONFIG={config}\nexport SCREENER_CONFIG\n"
        f"SCREENER_BIN={SCREENER}\nexport SCREENER_BIN\n"
        f"SCREENER_HOOKD_SOCKET={hookd}\nexport SCREENER_HOOKD_SOCKET\n"
        f"exec {REPO / 'jobs' / hook}\n"
    )
    path.chmod(0o755)
    return path


def start_hookd(sock: str | Path, log: Path | None = None) -> subprocess.Popen[str]:
    """`screener hookd` on ``sock``, returned once it listens (its first line says so). Its
    later lines (one per hook run) go to ``log``, else stay in the pipe for the caller (who
    must read them: a full pipe would stall the server)."""
    argv = in_slurm_root([str(SCREENER), "hookd", "--socket", str(sock)])  # beside slurmctld
    if log is not None:
        with log.open("w") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=out, text=True)

        def up() -> bool:
            return proc.poll() is not None or "listening on" in log.read_text()

        wait_for(f"hookd on {sock} to listen", up, timeout=60)
        assert proc.poll() is None, log.read_text()
        return proc
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "listening on" in line, line
    return proc


@contextlib.contextmanager
def own_hookd(directory: Path) -> Iterator[Path]:
    """A `screener hookd` for one cluster's hooks, as a site runs it (docs/slurm.md): its
    socket (in a private directory short enough for a socket path), its journal in
    ``directory``/hookd.log; stopped at the end."""
    private = Path(tempfile.mkdtemp(prefix="scr-hookd-"))  # 0700: hookd serves only there
    sock = private / "hookd.sock"
    proc = start_hookd(sock, log=directory / "hookd.log")
    try:
        yield sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(private, ignore_errors=True)


def hooked_cluster(
    directory: Path, config: Path, nodes: int = 6, hookd: str = "off", paced: bool = True
) -> Iterator[ClusterHandle]:
    """Bring up a cluster in a free slot with screener's hooks; down at the end. ``hookd``:
    "off", each hook run in its own process; "own", through a `screener hookd` started for
    this cluster (own_hookd: each hook run then skips ~0.9 CPU s of imports, on 2 shared
    cores); else the socket of the caller's server. ``paced`` False: the devices run
    unpaced (no `up --pace`: heal leaves them unthrottled), for a bench that paces some
    nodes itself (bench/time_to_start.py's mixed fleet)."""
    with contextlib.ExitStack() as stack:
        sock = str(stack.enter_context(own_hookd(directory))) if hookd == "own" else hookd
        prolog = hook_script(directory, "prolog-slurmctld", config, sock)
        epilog = hook_script(directory, "epilog-slurmctld", config, sock)
        slot = stack.enter_context(claim_slot())
        mc = Cluster(slot.state_dir)
        try:
            info = mc.up(
                nodes,
                subnet=slot.subnet,
                slurm_port_base=slot.slurm_port_base,
                prolog=str(prolog),
                epilog=str(epilog),
                nested_loop=True,  # slow reads show in each node's own iostat
                slurm_version=slurm_version_under_test(),
                # every device at one pace: healthy nodes read alike and probes leave the
                # 2 shared cores to the other workers (a 6-node screen: 15 -> 6 CPU s)
                pace=PACE if paced else None,
                pace_iops=PACE_IOPS if paced else None,
            )
            yield ClusterHandle(mc, info)
        finally:
            mc.down()  # before hookd stops (the stack's first): no hook left to serve


def write_config(path: Path, cluster: ClusterHandle, db: str, log: Path, **sections: Any) -> None:
    """A policy for the emulated nodes: short probes, the cluster's SSH files, test knobs."""
    base: dict[str, dict[str, Any]] = {
        "probe": {"target": cluster.scratch, "size_mib": 64, "runtime_s": 1.0, "ramp_s": 0.25},
        "transport": {
            "ssh_config": str(cluster.ssh_config),
            "known_hosts": str(cluster.known_hosts),
            "connect_timeout_s": 5.0,
            "command_timeout_s": 60.0,
        },
        "store": {"url": db, "spool_dir": str(path.parent / "spool")},
        "prolog": {"log_file": str(log), "budget_s": 120.0, "iostat_interval_s": 1},
        "slurm": {"partition_max_drain_fraction": 0.5},
        # The nightly sweep's learning reads (sweep/learn.py) are tests/test_sweep.py's and
        # the benches'; elsewhere they would add runs no test counts, and 5-8 s a first sweep.
        "sweep": {"triage_reads": 0},
    }
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    lines = []
    for name, values in base.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")


def sbatch(cluster: ClusterHandle, *args: str) -> str:
    """Submit a batch job; its id."""
    out = cluster.slurm("sbatch", "--parsable", *args).stdout.strip()
    return out.split(";")[0]


def job_state(cluster: ClusterHandle, job_id: str) -> dict[str, Any]:
    """The job's squeue --json record (the controller keeps finished jobs for MinJobAge), in
    22.05's shape whatever SCREENER_TEST_SLURM runs (as_2205_job)."""
    # 23.02+ squeue applies its default filter with --json too (22.05 ignored filters then):
    # a finished job is listed only with --states=all (as in the CLI backend's squeue_argv).
    data = json.loads(cluster.slurm("squeue", "--json", "--states=all").stdout)
    for job in data["jobs"]:
        if str(job["job_id"]) == job_id:
            return as_2205_job(job)
    raise AssertionError(f"job {job_id} unknown to Slurm")


def as_2205_job(job: dict[str, Any]) -> dict[str, Any]:
    """A squeue --json job as the tests read it (22.05): 23.02+ print `job_state` as a list
    (base state, then flags: ["PENDING", "COMPLETING"]); 22.05 printed one word, certain
    flags before the base state (screener.slurm.parse.job_state). Numbers stay as they are
    (restart_cnt is plain in 24.11 and 26.05)."""
    out = dict(job)
    if isinstance(job.get("job_state"), list):
        out["job_state"] = one_word_state(job["job_state"])  # screener's own reading
    return out


def as_2205_nodes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """sinfo --json nodes as the tests read them (22.05: `state` one lower-case word,
    `state_flags` the rest, `reason` text). 23.02+ group nodes under sinfo[].nodes.nodes with
    `state` a list and `reason` an object; the node-level fields tests use are rebuilt."""
    if "nodes" in data:
        return list(data["nodes"])
    nodes: dict[str, dict[str, Any]] = {}
    for rec in data["sinfo"]:
        state = list(rec["node"]["state"])
        reason = rec.get("reason")
        text = reason.get("description", "") if isinstance(reason, dict) else reason or ""
        part = rec.get("partition", {}).get("name", "")
        assert not text or len(rec["nodes"]["nodes"]) == 1, f"grouped reason, no -N: {rec}"
        for name in rec["nodes"]["nodes"]:
            node = nodes.setdefault(
                name,
                {
                    "name": name,
                    "state": state[0].lower() if state else "",
                    "state_flags": state[1:],
                    "reason": text,
                    "partitions": [],
                },
            )
            if part and part not in node["partitions"]:
                node["partitions"].append(part)
    return list(nodes.values())


def wait_for(what: str, check: Callable[[], T | bool | None], timeout: float = 180.0) -> T:
    """Poll a real condition until it holds (its truthy value), backing off from 20 ms to
    0.25 s between polls (procs.wait_until); AssertionError naming ``what`` at the timeout."""
    try:
        return wait_until(what, check, time.monotonic() + timeout)  # type: ignore[return-value]
    except ClusterError as exc:
        raise AssertionError(str(exc)) from None


def wait_job(cluster: ClusterHandle, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
    """Poll until the job has finished (COMPLETED/FAILED/CANCELLED...); its last record."""
    job: dict[str, Any] = {}

    def done() -> dict[str, Any] | None:
        nonlocal job
        job = job_state(cluster, job_id)
        return job if job["job_state"] not in ACTIVE else None

    try:
        return wait_for(f"job {job_id} to finish", done, timeout)
    except AssertionError:
        raise AssertionError(
            f"job {job_id} did not finish in {timeout:g}s: {job.get('job_state')}"
        ) from None


def sinfo_nodes(cluster: ClusterHandle) -> dict[str, dict[str, Any]]:
    # -N: 23.02+ group nodes alike but for their reason (screener's sinfo_argv says why)
    data = json.loads(cluster.slurm("sinfo", "--json", "-N").stdout)
    return {n["name"]: n for n in as_2205_nodes(data)}


def run_screener(
    cluster: ClusterHandle,
    config: Path,
    *args: str,
    cwd: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`screener ARGS` against the cluster with ``config`` (and SCREENER_BIN for sbatch)."""
    env = cluster.env()
    env.update(extra_env or {})
    env["SCREENER_CONFIG"] = str(config)
    env["SCREENER_BIN"] = str(SCREENER)
    return subprocess.run(
        [str(SCREENER), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
        cwd=cwd,
    )


def fio_job(
    cluster: ClusterHandle, node: str, rw: str, bs: str = "1M", runtime: float = 1.5
) -> dict[str, Any]:
    """Run one fio job over ssh on node's /scratch (direct I/O) and return its JSON job."""
    res = cluster.ssh(
        node,
        "fio",
        "--name=t",
        f"--filename={cluster.scratch}/minicluster-test.dat",
        "--size=64M",  # written first by the write job; reads never hit unwritten blocks
        f"--rw={rw}",
        f"--bs={bs}",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        f"--runtime={runtime}",
        "--time_based",
        "--output-format=json",
    )
    job: dict[str, Any] = json.loads(res.stdout)["jobs"][0]
    return job


PACE = "300M"  # bytes/s: every hooked cluster's devices (up --pace) and pace_devices
PACE_IOPS = 20_000  # 4k reads/s of every hooked cluster's devices (up --pace-iops)


def pace_devices(cluster: ClusterHandle, nodes: list[str]) -> None:
    """Throttle reads and writes of ``nodes`` to PACE, so the device sets the job's pace and
    not the 2 shared cores: unthrottled, a loop device on page cache reads at ~5 GB/s and a
    node that loses the CPU for 50 ms looks 0.4x slower than its peers (seen in CI). Hooked
    clusters start paced (up's pace); this sets it on the session cluster, or back after a
    test's own slow_read on a hooked one."""
    for n in nodes:
        cluster.inject(n, "slow_read", PACE)
        cluster.inject(n, "slow_write", PACE)


def module_cluster(factory: Any, name: str, nodes: int) -> Iterator[tuple[ClusterHandle, Path]]:
    """A module's hooked cluster (a pytest TempPathFactory names its directory): (handle,
    directory holding screener.toml, which each test rewrites). Its hooks go through its
    own hookd, as a site deploys them; tests/test_prolog.py keeps them in process."""
    d = factory.mktemp(name)
    config = d / "screener.toml"
    config.write_text("")
    for handle in hooked_cluster(d, config, nodes=nodes, hookd="own"):
        yield handle, d


def site_info(cluster: ClusterHandle, d: Path, tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """One test's site on a module cluster: a fresh SQLite DB and prolog log in tmp_path,
    the policy written with ``sections`` (write_config's)."""
    info: dict[str, Any] = {
        "cluster": cluster,
        "config": d / "screener.toml",
        "db": f"sqlite:///{tmp_path}/screener.db",
        "log": tmp_path / "prolog.log",
        "out": tmp_path,
    }
    write_config(info["config"], cluster, info["db"], info["log"], **sections)
    return info


def seen_by_the_sweep(
    cluster: ClusterHandle,
    config: Path,
    db: str,
    mb_s: float = 300.0,
    per_node: dict[str, float] | None = None,
) -> None:
    """Every node's full-probe baseline of two hours ago at ``mb_s`` (PACE), or at its own
    rate in ``per_node`` (MB/s, a mixed fleet), as a site's sweeps leave it: not fresh
    (every prolog probes) but history, so the prolog's triage has a yardstick besides the
    peers (store.history.past_figures)."""
    from datetime import UTC, datetime, timedelta

    from screener.policy import load_policy
    from screener.probe.fio import recipe_fingerprint
    from screener.probe_data import RunSummary, Status, Trigger, Verdict
    from screener.store import open_store

    recipe = recipe_fingerprint(load_policy(config).probe)
    with open_store(db, upgrade=True) as store:
        when = datetime.now(UTC) - timedelta(hours=2)
        run = store.start_run(Trigger.SWEEP, list(cluster.nodes), {}, None, cluster.hostlist, when)
        seen = tuple(
            Verdict(
                n,
                Status.OK,
                "within peers",
                read_mb_s=(per_node or {}).get(n, mb_s),
                recipe=recipe,
                baseline=True,
            )
            for n in cluster.nodes
        )
        store.record_verdicts(run, RunSummary(verdicts=seen))
        store.finish_run(run, when, "done")
