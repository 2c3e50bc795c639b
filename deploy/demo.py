"""`make demo`: an 8-node emulated cluster with one slow-read node, screened by the real CLI.

The cluster is left up (idempotent on re-runs) so an admin can look around; the last line
says how to take it down. Results go to the embedded default database (SQLite) unless
SCREENER_DATABASE_URL says otherwise. SCREENER_TEST_SLURM=24.11 (`make demo SLURM=24.11`)
runs that Slurm from its deploy/slurmroot root instead of the host's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deploy.minicluster.cluster import Cluster
from deploy.minicluster.spec import SPEC_FILE, ClusterInfo, slurm_version_arg
from screener import cli
from screener.errors import ScreenerError
from screener.policy import Policy, database_url

NODES = 8
SLOW_NODE = "node03"
SLOW_READ_BPS = "20M"  # 20 MB/s: ~100x below the loop devices' normal read rate


def demo_config(info: ClusterInfo) -> Path:
    """A policy for the emulated cluster: short probes, its ssh_config and known_hosts."""
    path = info.state_dir / "screener-demo.toml"
    path.write_text(
        "# written by deploy/demo.py for the emulated cluster\n"
        "[probe]\n"
        f'target = "{info.scratch}"\n'
        "size_mib = 256\n"
        "runtime_s = 2.0\n"
        "ramp_s = 0.5\n"
        "[transport]\n"
        f'ssh_config = "{info.ssh_config}"\n'
        f'known_hosts = "{info.known_hosts}"\n'
    )
    return path


def main() -> int:
    """Bring the demo cluster up, screen it with `screener screen`, say where things are."""
    try:
        version = slurm_version_arg(os.environ.get("SCREENER_TEST_SLURM"))
        cluster = Cluster()
        if (cluster.state_dir / SPEC_FILE).exists():  # a second `make demo`: reuse, repair
            print(
                f"the emulated cluster in {cluster.state_dir} is already up: checking it "
                "(restarting any dead daemon) and reusing it ...",
                flush=True,
            )
        else:
            slurm = f" (Slurm {version})" if version else ""
            print(
                f"bringing up {NODES} emulated nodes{slurm} in {cluster.state_dir} ...",
                flush=True,
            )
        faults = [f"{SLOW_NODE}:slow_read={SLOW_READ_BPS}"]
        info = cluster.up(nodes=NODES, faults=faults, slurm_version=version)
    except ScreenerError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 1
    print(f"{SLOW_NODE} reads are throttled to {SLOW_READ_BPS}B/s; writes are not.\n", flush=True)
    config = demo_config(info)
    argv = ["--config", str(config), "screen", info.hostlist]
    print(f"$ screener {' '.join(argv)}", flush=True)
    code = cli.main(argv)
    print(f"\nresults stored in {database_url(Policy())}")
    path = "" if info.client_bin is None else f"PATH={info.client_bin}:$PATH "
    print(
        f"the emulated cluster is still up (ssh -F {info.ssh_config} {SLOW_NODE}; "
        f"{path}SLURM_CONF={info.slurm_conf} sinfo); take it down with: make cluster-down"
    )
    return 0 if code in (0, cli.EXIT_SLOW) else code


if __name__ == "__main__":
    sys.exit(main())
