"""Pick the Slurm backend the policy asks for and say why (doctor, the prolog's first line)."""

from __future__ import annotations

import re

from screener.errors import SlurmError, TransportError
from screener.policy import SlurmPolicy
from screener.process import run_command
from screener.slurm.cli_backend import CliSlurm
from screener.slurm.client import SlurmClient
from screener.slurm.pyslurm_backend import PyslurmClient, probe_pyslurm


def slurm_version(timeout_s: float = 10.0) -> str | None:
    """The Slurm release of the command-line tools (``sinfo --version`` -> "22.05.8")."""
    try:
        res = run_command(["sinfo", "--version"], timeout=timeout_s)
    except TransportError:
        return None
    m = re.search(r"(\d+\.\d+\.\d+)", res.stdout)
    return m.group(1) if m and res.exit_status == 0 else None


def select_client(policy: SlurmPolicy) -> tuple[SlurmClient, str]:
    """(client, why). ``auto`` uses pyslurm only when it matches libslurm, else the CLI."""
    if policy.backend == "cli":
        return CliSlurm(policy.command_timeout_s), "cli: configured (slurm.backend = cli)"
    mod, why = probe_pyslurm(lambda: slurm_version(policy.command_timeout_s))
    if mod is not None:
        return PyslurmClient(mod), f"pyslurm: {why}"
    if policy.backend == "pyslurm":
        raise SlurmError(f"slurm.backend = pyslurm but {why}")
    return CliSlurm(policy.command_timeout_s), f"cli: {why}; using sinfo/squeue/scontrol"
