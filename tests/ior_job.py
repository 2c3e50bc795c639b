"""Real IOR on the emulated cluster through jobs/ior.sbatch (the project's batch script), for
the in-job attribution tests and for capturing their outputs (tests/data/ior/README.md).

IOR is built from ../shared/vendor by `make ior` into /opt/ior (no registry packages it).
Under Slurm 22.05 its ranks start with PMIx (`SLURM_MPI_TYPE=pmix`: Debian's Open MPI has
no PMI-1/2); the emulated nodes share /tmp, so the PMIx client directory goes to each
node's own /scratch (`SLURM_PMIX_TMPDIR`), else 3 of 4 ranks fail to launch ("File exists").
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from deploy.minicluster import ClusterHandle
from tests.hooked_cluster import SLURM_UNDER_TEST

REPO = Path(__file__).resolve().parents[1]
IOR = Path("/opt/ior/bin/ior")
BUILD_TOOLS = ("mpirun", "autoconf", "automake", "libtoolize", "make", "gcc")


def missing_ior() -> str | None:
    """Why real IOR cannot run here (None: it can): said loudly by the skip."""
    if SLURM_UNDER_TEST is not None:
        # /opt/ior links the host's Open MPI 4.1 (libmpi.so.40); a Slurm root's /usr has no
        # Open MPI, so its ranks cannot even load (exit 127): the in-job attribution tests run
        # on the host's 22.05 only (docs/slurm.md, verified versions)
        return (
            f"SCREENER_TEST_SLURM={SLURM_UNDER_TEST}: real IOR (make ior) links the host's "
            "Open MPI, which that Slurm's root lacks: run on the host's 22.05"
        )
    if IOR.is_file():
        return None
    tools = [t for t in BUILD_TOOLS if shutil.which(t) is None]
    return (
        f"IOR IS NOT BUILT ({IOR} missing): run `make ior` (builds it from "
        f"../shared/vendor/ior-5fcf0ba.tar.gz); missing build tools: {', '.join(tools) or 'none'}"
    )


def submit_ior(
    cluster: ClusterHandle, out: Path, nodes: list[str], block: str, iterations: int
) -> str:
    """sbatch jobs/ior.sbatch on ``nodes`` (1 rank each), outputs in ``out``; the job id."""
    env = {
        **cluster.env(),
        "IOR": str(IOR),
        "IOR_BLOCK": block,
        "IOR_ITER": str(iterations),
        "SLURM_MPI_TYPE": "pmix",
        "SLURM_PMIX_TMPDIR": cluster.scratch,  # per node: the nodes share /tmp
        # A rank segfaulted in MPI_Init about 1 CI run in 3 ("Failing at address: (nil)").
        # Its core (2026-12-04): ompi_mpi_init -> opal_progress -> btl/tcp calls ob1's MATCH
        # callback (tag 0x41) before ob1 has registered it (NULL): a peer that had left
        # MPI_Init already sent its first Allreduce. It could leave early because MPI_Init's
        # closing barrier is a PMIx fence without data, which Slurm's mpi/pmix ("mixed", the
        # default) runs as its tree collective, and 22.05 makes every node a childless root
        # when TreeWidth (50) exceeds the step's node count: each stepd releases its own rank
        # at once (stepd debug log: "local=1, child_cntr=0", then "local delivery", on all 4
        # nodes). The ring collective waits for every node. Measured on the emulated cluster,
        # 4 nodes: 1 start-up segfault in 40 jobs/ior.sbatch runs as before, 0 in 85 with
        # ring; with one rank's first fence release held back 300 ms (an LD_PRELOAD shim), 10
        # of 10 srun launches (4 of them IOR) segfaulted so as before, 0 of 10 with ring.
        # jobs/ior.sbatch sets it too (a real site's small IOR job has the same barrier).
        "SLURM_PMIX_FENCE": "ring",
        # Kept from before the cause was known (PMIx's shared-memory store was suspected):
        # every ring run above had it set, so it stays until a loop shows it is not needed.
        "PMIX_MCA_gds": "hash",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        # The emulated nodes are one host, so Open MPI sees ranks on "different nodes" and
        # wires them over TCP. By default it excludes loopback and dials the host's external
        # address (here eth0's 192.0.2.2): under load such connects failed ("connect() to
        # 192.0.2.2:1025 failed", 2 CI runs), and tests talk only to loopback anyway.
        "OMPI_MCA_btl_tcp_if_include": "lo",
        "OMPI_MCA_oob_tcp_if_include": "lo",
    }
    argv = [
        "sbatch",
        "--parsable",
        "-N",
        str(len(nodes)),
        "-w",
        ",".join(nodes),
        str(REPO / "jobs" / "ior.sbatch"),
    ]
    res = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def job_state(cluster: ClusterHandle, job: str) -> str:
    show = cluster.slurm("scontrol", "show", "job", job, "-o").stdout
    m = re.search(r"JobState=(\S+)", show)
    return m.group(1) if m else ""


def wait_ior(cluster: ClusterHandle, job: str, out: Path, timeout: float = 300.0) -> None:
    """Until the job has finished; it must have COMPLETED with both IOR outputs written."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = job_state(cluster, job)
        if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            break
        time.sleep(0.2)  # polling the job's real state, bounded by the deadline
    log = out / f"ior-{job}.out"
    text = log.read_text() if log.exists() else "(no job output)"
    assert state == "COMPLETED", f"job {job}: {state}\n{text}"
    for suffix in ("summary.json", "ranks.csv"):
        assert (out / f"ior-{job}.{suffix}").is_file(), text
