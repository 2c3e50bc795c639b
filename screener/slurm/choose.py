"""Pick the Slurm backend the policy asks for and say why (doctor, the prolog's first line)."""

from __future__ import annotations

import importlib

from screener.errors import SlurmError
from screener.policy import SlurmPolicy
from screener.slurm.cli_backend import CliSlurm
from screener.slurm.client import SlurmClient
from screener.slurm.pyslurm_backend import PyslurmClient
from screener.slurm.pyslurm_probe import judge, probe_pyslurm


def select_client(policy: SlurmPolicy) -> tuple[SlurmClient, str]:
    """(client, why). ``auto``: pyslurm only when it imports in a child process, matches the
    Slurm it was built for and that pair is contract-tested; else the CLI."""
    if policy.backend == "cli":
        return CliSlurm(policy.command_timeout_s), "cli: configured (slurm.backend = cli)"
    forced = policy.backend == "pyslurm"
    ok, why = judge(probe_pyslurm(policy.command_timeout_s), forced)
    if ok:
        try:
            mod = importlib.import_module("pyslurm")  # safe: the child imported it
        except Exception as exc:
            ok, why = False, f"import pyslurm: {type(exc).__name__}: {exc}"
        else:
            return PyslurmClient(mod), f"pyslurm: {why}"
    if forced:
        raise SlurmError(f"slurm.backend = pyslurm but {why}")
    return CliSlurm(policy.command_timeout_s), f"cli: {why}; using sinfo/squeue/scontrol"
