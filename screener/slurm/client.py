"""What screener needs to know about Slurm nodes and jobs, and the client Protocol."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from screener.errors import SlurmError

# A drain reason travels as one argv word to scontrol and is shown by `sinfo -R`: printable
# ASCII, no quotes or '=' (scontrol re-parses key=value pairs), short enough to read.
_REASON_RE = re.compile(r"[A-Za-z0-9 _.,:;+/()%<>@#-]{1,64}")
# Slurm job ids: 123, array task 123_4, het job component 123+1.
_JOB_ID_RE = re.compile(r"[0-9]{1,12}([_+][0-9]{1,9})?")
# Flags that mean "a job is or may still be running on the node": never probe it over SSH.
BUSY_STATES = frozenset({"ALLOCATED", "MIXED", "COMPLETING", "DRAINING"})


def check_reason(reason: str) -> str:
    """Return ``reason`` if it is safe as a Slurm drain reason, else raise SlurmError."""
    if not _REASON_RE.fullmatch(reason):
        raise SlurmError(f"drain reason {reason!r} is not 1-64 plain characters")
    return reason


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` if it looks like a Slurm job id, else raise SlurmError."""
    if not _JOB_ID_RE.fullmatch(job_id):
        raise SlurmError(f"invalid Slurm job id {job_id!r}")
    return job_id


@dataclass(frozen=True)
class SlurmNode:
    """A node as Slurm sees it: base state and flags in upper case, e.g. {"IDLE", "DRAIN"}."""

    name: str
    states: frozenset[str]
    reason: str = ""
    partitions: tuple[str, ...] = ()
    # When the reason was set and by whom (`sinfo -R`'s TIMESTAMP and USER), from Slurm's
    # epoch seconds as aware UTC (screener.slurm.parse.epoch_time); None and "" when there is
    # no reason, or Slurm does not say. Every backend fills them alike (the Slurm contract).
    reason_time: datetime | None = None
    reason_user: str = ""

    @property
    def drained(self) -> bool:
        """Drain flag set (DRAINED, or DRAINING while a job still runs)."""
        return "DRAIN" in self.states or "DRAINED" in self.states or "DRAINING" in self.states

    @property
    def busy(self) -> bool:
        """A job is (or may still be) running on it: never probe it outside Slurm."""
        # 22.05 reports a draining node as base "allocated"/"mixed" plus the flag DRAIN
        return bool(self.states & BUSY_STATES)

    @property
    def idle_drained(self) -> bool:
        """Drained with nothing running: may be probed over SSH."""
        return self.drained and not self.busy and "DOWN" not in self.states


@dataclass(frozen=True)
class SlurmJob:
    """The job fields the prolog decides on."""

    job_id: str
    nodes: tuple[str, ...]
    partition: str = ""
    name: str = ""
    comment: str = ""
    state: str = ""
    reason: str = ""  # why it is pending (e.g. "BeginTime")
    restarts: int = 0
    # Its nodes to itself (Slurm's OverSubscribe=NO: --exclusive, or select/linear's whole
    # nodes); None when not known (the backends' job() do not fill it: the epilog asks
    # `scontrol show job`). Unknown counts as shared wherever it decides trust.
    exclusive: bool | None = None


class SlurmClient(Protocol):
    """The Slurm operations screener uses; every backend raises SlurmError on failure."""

    @property
    def name(self) -> str:
        """ "cli" or "pyslurm", for logs and `screener doctor`."""
        ...

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        """Nodes with state and reason (all nodes when ``names`` is None)."""
        ...

    def job(self, job_id: str) -> SlurmJob | None:
        """One job, or None when Slurm no longer knows it."""
        ...

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        """Drain ``nodes`` with ``reason`` (one call for all of them)."""
        ...

    def resume(self, nodes: Sequence[str]) -> None:
        """Resume ``nodes`` (clears the drain and its reason)."""
        ...

    def release(self, job_id: str) -> None:
        """Make a pending job eligible now (a requeued job otherwise waits for BeginTime)."""
        ...
