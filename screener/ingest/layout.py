"""Which node ran which rank: block distribution from an explicit node list, or Slurm's
own record of the job's task layout through the ``LayoutSource`` seam (filled by the Slurm
client; not implemented here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from screener.errors import ConfigError
from screener.nodes import validate_node


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
