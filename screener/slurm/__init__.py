"""Slurm client: list nodes (state, reason), read a job, drain with a reason, resume.

One Protocol (``SlurmClient``), two backends: the command line (``sinfo --json``,
``squeue --json``, ``scontrol update``; tested on 22.05) and pyslurm (used only when it
imports and matches libslurm; untested here). ``select_client`` picks one and says why.
"""

from screener.slurm.choose import select_client
from screener.slurm.client import SlurmClient, SlurmJob, SlurmNode, check_reason

__all__ = ["SlurmClient", "SlurmJob", "SlurmNode", "check_reason", "select_client"]
