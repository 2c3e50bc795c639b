"""The pyslurm backend: the SlurmClient Protocol over pyslurm 22.5's Node/Job API.

Verified against a real slurmctld 22.05 by tests/test_slurm_contract.py (the same contract
suite the CLI backend passes). pyslurm's RPCs run in C holding the GIL, so nothing in this
process can cut one short: a controller that does not answer is a SlurmError after
libslurm's own retries (about MessageTimeout, slurm.conf), where the CLI backend kills its
command after ``slurm.command_timeout_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from screener.errors import ConfigError, SlurmError
from screener.hostlist import expand_nodeset, fold_nodes, validate_node
from screener.slurm.client import SlurmJob, SlurmNode, check_job_id, check_reason
from screener.slurm.job_id import JobRef, match_job, parse_job_id

T = TypeVar("T")
_STATE_SUFFIXES = "*~#!%$@^-"


def node_states(state: str) -> frozenset[str]:
    """pyslurm's one state string ("IDLE+DRAIN", "MIXED+DRAIN") as the CLI's set of flags."""
    return frozenset(s.upper().rstrip(_STATE_SUFFIXES) for s in state.split("+") if s)


class PyslurmClient:
    """SlurmClient over an imported pyslurm module (select_client imports it safely)."""

    name = "pyslurm"

    def __init__(self, mod: Any, timeout_s: float = 20.0) -> None:
        self.mod = mod
        self.timeout_s = timeout_s  # kept for doctor; libslurm's MessageTimeout bounds RPCs

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one pyslurm RPC; any failure is a one-line SlurmError in Slurm's words."""
        try:
            return fn()
        except Exception as exc:  # RPCError, ValueError, or pyslurm's own AttributeError
            raise SlurmError(f"pyslurm: {what}: {_message(exc)}") from None

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        loaded = self._call("load nodes", lambda: list(self.mod.Nodes.load().values()))
        wanted = None if names is None else set(names)
        out: dict[str, SlurmNode] = {}
        for node in loaded:
            name = _node_name(node.name)
            if wanted is not None and name not in wanted:
                continue
            out[name] = SlurmNode(
                name=name,
                states=node_states(str(node.state or "")),
                reason=str(node.reason or ""),
                partitions=tuple(str(p) for p in (node.partitions or ()) if p),
            )
        return [out[n] for n in sorted(out)]

    def job(self, job_id: str) -> SlurmJob | None:
        ref = parse_job_id(check_job_id(job_id))
        loaded = self._call("load jobs", lambda: list(self.mod.Jobs.load().values()))
        found = match_job(ref, [(_ref_of(j), j) for j in loaded])
        if found is None:
            return None
        nodelist = str(found.allocated_nodes or "")
        try:
            nodes = tuple(expand_nodeset(nodelist)) if nodelist.strip() else ()
        except ConfigError as exc:
            raise SlurmError(f"pyslurm: job {job_id}: {exc}") from None
        return SlurmJob(
            job_id=job_id,
            nodes=nodes,
            partition=str(found.partition or ""),
            name=str(found.name or ""),
            comment=str(found.comment or ""),
            state=str(found.state or ""),
            reason=str(found.state_reason or ""),
            restarts=int(found.requeue_count or 0),
        )

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        if nodes:
            self._update(nodes, state="DRAIN", reason=check_reason(reason))

    def resume(self, nodes: Sequence[str]) -> None:
        if nodes:
            self._update(nodes, state="RESUME")

    def release(self, job_id: str) -> None:
        ref = parse_job_id(check_job_id(job_id))
        unique = ref.job_id if ref.kind == "job" else self._unique_id(ref, job_id)
        desc = self.mod.JobSubmitDescription(begin_time="now")  # = scontrol starttime=now
        self._call(f"release job {job_id}", lambda: self.mod.Job(unique).modify(desc))

    def _unique_id(self, ref: JobRef, job_id: str) -> int:
        """The unique job id of an array task or het component (Job.modify takes only that)."""
        loaded = self._call("load jobs", lambda: list(self.mod.Jobs.load().values()))
        found = match_job(ref, [(_ref_of(j), j) for j in loaded])
        if found is None:
            raise SlurmError(f"pyslurm: release job {job_id}: Invalid job id specified")
        return int(found.id)

    def _update(self, nodes: Sequence[str], **changes: str) -> None:
        hostlist = fold_nodes(nodes)  # validated names as one Slurm hostlist: one RPC
        change = self.mod.Node(**changes)
        self._call(f"update {hostlist}", lambda: self.mod.Node(hostlist).modify(change))


def _ref_of(job: Any) -> tuple[int, int | None, int | None, int | None, int | None]:
    """(job id, array id, array task, het id, het offset) of a pyslurm Job."""
    het_id = job.heterogeneous_id or None
    # pyslurm reads het offset 0 (the leader) as None: a het job's leader is offset 0
    het_offset = (job.heterogeneous_offset or 0) if het_id else None
    return int(job.id), job.array_id, job.array_task_id, het_id, het_offset


def _node_name(value: Any) -> str:
    try:
        return validate_node(str(value or ""))
    except ConfigError as exc:
        raise SlurmError(f"pyslurm: {exc}") from None


def _message(exc: BaseException) -> str:
    """Slurm's own words for a pyslurm error, on one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
