"""The command-line Slurm backend: ``sinfo --json``, ``squeue --json``, ``scontrol update``.

Tested on Slurm 22.05, 24.11 and 26.05 (22.05 has no ``scontrol --json``, and its
``sinfo``/``squeue`` ignore node/job filters together with ``--json``, so filtering is done
here). Every command
is an argv list built by a pure function; the node list and reason are validated first.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from screener.errors import SlurmError, TransportError
from screener.hostlist import fold_nodes
from screener.process import run_command
from screener.slurm.client import SlurmJob, SlurmNode, check_job_id, check_reason
from screener.slurm.job_id import match_job, parse_job_id
from screener.slurm.parse import parse_sinfo, parse_squeue_keyed


def sinfo_argv() -> list[str]:
    """Every node with state, flags and reason."""
    # 22.05: --json prints all nodes (-n is ignored with it, -N changes nothing); 23.02+
    # group nodes by state into one record carrying the first node's reason unless -N: an
    # admin's drain beside screener's read as screener's (seen on 24.11 and 26.05)
    return ["sinfo", "--json", "-N"]


def squeue_argv() -> list[str]:
    """Every job the controller still knows (pending, running, recently finished)."""
    return [
        "squeue",
        "--json",  # 22.05: --jobs is ignored with --json; we filter by id
        "--states=all",  # 24.11+ apply the default filter to --json: a finished job vanished
    ]


def drain_argv(nodes: Sequence[str], reason: str) -> list[str]:
    """Drain ``nodes`` (one hostlist, one call) with a validated reason."""
    return [
        "scontrol",
        "update",
        f"nodename={fold_nodes(nodes)}",  # validated names folded to a Slurm hostlist
        "state=drain",  # DRAIN: running jobs finish, no new job is scheduled
        f"reason={check_reason(reason)}",  # one argv word: no shell, no quoting needed
    ]


def resume_argv(nodes: Sequence[str]) -> list[str]:
    """Resume ``nodes``: clears DRAIN and the reason."""
    return ["scontrol", "update", f"nodename={fold_nodes(nodes)}", "state=resume"]


def release_argv(job_id: str) -> list[str]:
    """Make a requeued job eligible now instead of after its BeginTime (~2 min on 22.05)."""
    return ["scontrol", "update", f"jobid={check_job_id(job_id)}", "starttime=now"]


class CliSlurm:
    """SlurmClient over the Slurm commands on PATH (``SLURM_CONF`` from the environment)."""

    name = "cli"

    def __init__(self, timeout_s: float = 20.0) -> None:
        self.timeout_s = timeout_s

    def _run(self, argv: list[str]) -> str:
        try:
            res = run_command(argv, timeout=self.timeout_s)
        except TransportError as exc:
            raise SlurmError(f"{argv[0]}: {exc.message}") from None
        if res.exit_status != 0:
            lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip()]
            why = lines[-1] if lines else f"exit status {res.exit_status}"
            raise SlurmError(f"{' '.join(argv[:2])} failed: {why}")
        return res.stdout

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        every = parse_sinfo(self._run(sinfo_argv()))
        if names is None:
            return every
        wanted = set(names)
        return [n for n in every if n.name in wanted]

    def job(self, job_id: str) -> SlurmJob | None:
        ref = parse_job_id(check_job_id(job_id))
        found = match_job(ref, parse_squeue_keyed(self._run(squeue_argv())))
        return None if found is None else replace(found, job_id=job_id)

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        if nodes:
            self._run(drain_argv(nodes, reason))

    def resume(self, nodes: Sequence[str]) -> None:
        if nodes:
            self._run(resume_argv(nodes))

    def release(self, job_id: str) -> None:
        self._run(release_argv(job_id))


def slurm_conf_hint() -> str:
    """Where the command-line tools will find slurm.conf (for doctor and logs)."""
    return os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf (default)"
