"""Which node ran which rank: block distribution from an explicit node list, or from Slurm's
own record of the job (``scontrol show job -d``: node list, task count, tasks per node)
through the ``LayoutSource`` seam, which ``SlurmLayout`` fills."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from screener.errors import ConfigError
from screener.hostlist import validate_node
from screener.slurm.show_job import JobRecord, show_job


@dataclass(frozen=True)
class RankLayout:
    """``nodes[r]`` is the node that ran rank r."""

    nodes: tuple[str, ...]
    how: str  # e.g. "block, 4 ranks per node over node[01-04]" (shown and stored)

    def node_of(self, rank: int) -> str:
        """The node of ``rank``; ConfigError if the layout has fewer ranks."""
        if not 0 <= rank < len(self.nodes):
            raise ConfigError(
                f"rank {rank} is outside the task layout ({len(self.nodes)} ranks: {self.how})"
            )
        return self.nodes[rank]


class LayoutSource(Protocol):
    """Slurm's record of a job's tasks (``scontrol show job -d``/sacct), or None if unknown."""

    def task_layout(self, job_id: str) -> RankLayout | None:
        """The rank -> node map of the job's (first) step that ran the benchmark."""
        ...


def block_layout(nodes: Sequence[str], ranks_per_node: int) -> RankLayout:
    """Slurm's default block distribution: ranks 0..n-1 on the first node, then the next.

    ``nodes`` in the job's node-list order (an expanded Slurm hostlist is sorted, as
    Slurm orders them).
    """
    if isinstance(ranks_per_node, bool) or ranks_per_node < 1:
        raise ConfigError(f"--ranks-per-node must be >= 1, got {ranks_per_node}")
    if not nodes:
        raise ConfigError("the task layout needs at least one node")
    if len(set(nodes)) != len(nodes):
        raise ConfigError("the node list names a node twice")
    names = [validate_node(n) for n in nodes]
    by_rank = tuple(n for n in names for _ in range(ranks_per_node))
    return RankLayout(by_rank, f"block, {ranks_per_node} per node over {len(names)} nodes")


def record_layout(record: JobRecord) -> RankLayout:
    """Slurm's block layout of a job's tasks over its nodes, from its controller record.

    The benchmark step is assumed to span the whole allocation with the job's task count
    and the default block distribution, as ``srun`` with no -n/-N/--distribution (and
    jobs/ior.sbatch) does. Tasks that do not divide evenly: Slurm's block layout first
    counts tasks per node cyclically over the CPUs (so the first T mod N nodes get one
    more, e.g. 3 tasks on 2 nodes -> ranks 0,1 | 2, as captured here) -- only with equal
    CPU counts on every node; anything else is refused rather than guessed.
    """
    job = record.job_id or "?"
    if not record.nodes or record.num_tasks < 1:
        raise ConfigError(
            f"job {job} has no task layout in Slurm (state {record.state or 'unknown'}, "
            f"{len(record.nodes)} nodes, {record.num_tasks} tasks)"
        )
    n, tasks = len(record.nodes), record.num_tasks
    src = f"Slurm's record of job {job} (scontrol show job)"
    if tasks % n == 0:
        layout = block_layout(record.nodes, tasks // n)
        return RankLayout(layout.nodes, f"{layout.how}, from {src}")
    if len(set(record.cpus_per_node)) != 1 or len(record.cpus_per_node) != n:
        raise ConfigError(
            f"job {job} ran {tasks} tasks on {n} nodes with unequal or unknown CPU counts: "
            "its rank layout cannot be derived; give --nodes and --ranks-per-node"
        )
    counts = [tasks // n + (1 if i < tasks % n else 0) for i in range(n)]
    names = [validate_node(x) for x in record.nodes]
    by_rank = tuple(node for node, k in zip(names, counts, strict=True) for _ in range(k))
    return RankLayout(by_rank, f"block, {tasks} tasks over {n} nodes, from {src}")


class SlurmLayout:
    """LayoutSource over ``scontrol show job -d``: None when Slurm no longer knows the job
    (the controller forgets a finished job after ``MinJobAge``; there is no accounting).

    ``nodes``: the job's node list when the caller knows it better than the record. The
    epilog does (``SLURM_JOB_NODELIST``): while EpilogSlurmctld runs, the job is COMPLETING
    and 22.05's record may already list no nodes (seen on the emulated cluster).
    """

    def __init__(self, timeout_s: float = 20.0, nodes: Sequence[str] = ()) -> None:
        self.timeout_s = timeout_s
        self.nodes = tuple(nodes)
        # the record task_layout read (the epilog also takes the job's exclusivity from
        # it: one scontrol call); None until asked, or when Slurm forgot the job
        self.record: JobRecord | None = None

    def task_layout(self, job_id: str) -> RankLayout | None:
        """The job's rank -> node map from Slurm's record, or None if Slurm forgot it."""
        record = self.record = show_job(job_id, self.timeout_s)
        if record is None:
            return None
        if self.nodes:
            record = replace(record, nodes=self.nodes)
        return record_layout(record)
