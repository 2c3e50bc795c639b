"""Slurm client: list nodes (state, reason), read a job, drain with a reason, resume.

One Protocol (``SlurmClient``), two backends that pass one contract suite on Slurm 22.05:
the command line (``sinfo --json``, ``squeue --json``, ``scontrol update``) and pyslurm
22.5 (used only when it is safe to import and contract-tested for that release).
``select_client`` picks one and says why.
"""

from screener.slurm.choose import select_client
from screener.slurm.client import SlurmClient, SlurmJob, SlurmNode, check_reason

__all__ = ["SlurmClient", "SlurmJob", "SlurmNode", "check_reason", "select_client"]
