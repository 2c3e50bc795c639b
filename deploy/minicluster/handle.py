"""ClusterHandle: a running cluster plus its controls in one object, as the `cluster` pytest
fixture yields it (also handy for the demo and benchmarks)."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

from deploy.minicluster import argv
from deploy.minicluster.cluster import Cluster, parse_sinfo
from deploy.minicluster.procs import run, wait_until
from deploy.minicluster.spec import ClusterError, ClusterInfo


class ClusterHandle:
    """ClusterInfo's attributes plus inject/heal/reset and ssh/slurm helpers."""

    def __init__(self, cluster: Cluster, info: ClusterInfo) -> None:
        self.cluster = cluster
        self.info = info

    # -- what clients need to connect ------------------------------------------------------
    @property
    def nodes(self) -> list[str]:
        return self.info.nodes

    @property
    def state_dir(self) -> Path:
        return self.info.state_dir

    @property
    def ssh_config(self) -> Path:
        return self.info.ssh_config

    @property
    def known_hosts(self) -> Path:
        return self.info.known_hosts

    @property
    def client_key(self) -> Path:
        return self.info.client_key

    @property
    def ssh_port(self) -> int:
        return self.info.ssh_port

    @property
    def scratch(self) -> str:
        return self.info.scratch

    @property
    def slurm_conf(self) -> Path:
        return self.info.slurm_conf

    @property
    def hostlist(self) -> str:
        return self.info.hostlist

    def addr(self, node: str) -> str:
        return self.info.addr(node)

    def env(self, inherit: bool = True) -> dict[str, str]:
        return self.info.env(inherit)

    # -- controls ----------------------------------------------------------------------------
    def inject(self, node: str, kind: str, value: int | str | None = None) -> None:
        self.cluster.inject(node, kind, value)

    def heal(self, node: str | None = None) -> dict[str, list[str]]:
        return self.cluster.heal(node)

    def reset(self, timeout: float = 90.0) -> None:
        """Back to a clean cluster: faults healed, dead daemons restarted, no jobs left, every
        node idle (drained/down nodes resumed). Tests call this between each other."""
        deadline = time.monotonic() + timeout
        self.heal()
        spec = self.info.spec
        if not self.cluster.status().healthy:
            self.cluster.up(**dataclasses.asdict(spec), timeout=timeout)  # same spec: repair
        if not self.info.slurm:
            return
        env = self.env()
        bin_dir = self.info.client_bin
        run(argv.scancel_all(bin_dir), env=env)
        wait_until(
            "cancelled jobs to leave the queue",
            lambda: not run(argv.squeue_jobs(bin_dir), env=env).split(),
            deadline,
        )
        states: dict[str, str] = {}

        def idle() -> bool:
            nonlocal states
            states = parse_sinfo(run(argv.sinfo_states(bin_dir), env=env))
            stuck = [n for n in self.nodes if states.get(n, "").rstrip("*") in _RESUMABLE]
            if stuck:
                run(argv.resume_nodes(",".join(stuck), bin_dir), env=env)
            return all(states.get(n) == "idle" for n in self.nodes)

        wait_until("every node idle", idle, deadline, lambda: str(states))

    # -- running things ------------------------------------------------------------------------
    def ssh_argv(self, node: str, *cmd: str) -> list[str]:
        """`ssh -F <ssh_config> node -- <cmd quoted>` (strict host-key checking)."""
        self.info.index(node)
        return argv.ssh(self.ssh_config, node, list(cmd))

    def ssh(
        self, node: str, *cmd: str, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run cmd on node over real ssh; ClusterError on a non-zero exit when check."""
        return _run(self.ssh_argv(node, *cmd), None, timeout, check)

    def slurm(
        self, *cmd: str, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command (sinfo, srun, sbatch, ...) against this cluster (the
        cluster's version of it: a versioned cluster's shim)."""
        exe = argv.client(cmd[0], self.info.client_bin)
        return _run([exe, *cmd[1:]], self.env(), timeout, check)


_RESUMABLE = frozenset({"drained", "draining", "down", "drain", "fail", "failing"})


def _run(
    cmd: list[str], env: dict[str, str] | None, timeout: float, check: bool
) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    if check and res.returncode != 0:
        err = (res.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise ClusterError(f"{' '.join(cmd[:1] + cmd[-1:])} exited {res.returncode}: {err}")
    return res
