"""The pyslurm backend: the SlurmClient Protocol over pyslurm's Node/Job API.

One module for pyslurm 22.5 (Slurm 22.05) and 24.11 (Slurm 24.11): every call and field it
uses is the same in both (Nodes.load, Jobs.load, Node.modify, Job.modify with a
JobSubmitDescription; 24.11 only folds a partly allocated node into MIXED, as sinfo does).
25.05 removed the old pyslurm.node and 25.11 the old free functions, neither used here.
Verified against a real slurmctld of each by tests/test_slurm_contract.py (the same contract
suite the CLI backend passes). pyslurm's RPCs run in C holding the GIL, so nothing in this
process can cut one short: a controller that does not answer is a SlurmError after
libslurm's own retries (about MessageTimeout, slurm.conf), where the CLI backend kills its
command after ``slurm.command_timeout_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from screener.errors import SlurmError
from screener.hostlist import fold_nodes
from screener.slurm.client import SlurmJob, SlurmNode, check_job_id, check_reason
from screener.slurm.job_id import JobKey, JobRef, match_job, parse_job_id
from screener.slurm.parse import epoch_time, job_nodes, node_name, one_line
from screener.slurm.parse import node_states as flag_set

T = TypeVar("T")


def node_states(state: str) -> frozenset[str]:
    """pyslurm's one state string ("IDLE+DRAIN", "MIXED+DRAIN") as the CLI's set of flags."""
    return flag_set(state.split("+"), None)


class PyslurmClient:
    """SlurmClient over an imported pyslurm module (select_client imports it safely)."""

    name = "pyslurm"

    def __init__(self, mod: Any) -> None:
        self.mod = mod  # no timeout of ours: libslurm's MessageTimeout bounds every RPC

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one pyslurm RPC; any failure is a one-line SlurmError in Slurm's words."""
        try:
            return fn()
        except Exception as exc:  # RPCError, ValueError, or pyslurm's own AttributeError
            raise SlurmError(
                f"pyslurm: {what}: {one_line(str(exc)) or type(exc).__name__}"
            ) from None

    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]:
        loaded = self._call("load nodes", lambda: list(self.mod.Nodes.load().values()))
        wanted = None if names is None else set(names)
        out: dict[str, SlurmNode] = {}
        for node in loaded:
            name = node_name(str(node.name or ""), "pyslurm")
            if wanted is not None and name not in wanted:
                continue
            reason = str(node.reason or "")
            out[name] = SlurmNode(
                name=name,
                states=node_states(str(node.state or "")),
                reason=reason,
                partitions=tuple(str(p) for p in (node.partitions or ()) if p),
                reason_time=epoch_time(node.reason_time) if reason else None,
                reason_user=_reason_user(node) if reason else "",
            )
        return [out[n] for n in sorted(out)]

    def job(self, job_id: str) -> SlurmJob | None:
        found = self._find(parse_job_id(check_job_id(job_id)))
        if found is None:
            return None
        return SlurmJob(
            job_id=job_id,
            nodes=job_nodes(str(found.allocated_nodes or ""), f"pyslurm: job {job_id}"),
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
        unique = ref.job_id
        if ref.kind != "job":  # Job.modify takes only the unique id of a task or component
            if (found := self._find(ref)) is None:
                raise SlurmError(f"pyslurm: release job {job_id}: Invalid job id specified")
            unique = int(found.id)
        desc = self.mod.JobSubmitDescription(begin_time="now")  # = scontrol starttime=now
        self._call(f"release job {job_id}", lambda: self.mod.Job(unique).modify(desc))

    def _find(self, ref: JobRef) -> Any:
        """The pyslurm Job ``ref`` names (screener.slurm.job_id), or None."""
        loaded = self._call("load jobs", lambda: list(self.mod.Jobs.load().values()))
        return match_job(ref, [(_key_of(j), j) for j in loaded])

    def _update(self, nodes: Sequence[str], **changes: str) -> None:
        hostlist = fold_nodes(nodes)  # validated names as one Slurm hostlist: one RPC
        change = self.mod.Node(**changes)
        self._call(f"update {hostlist}", lambda: self.mod.Node(hostlist).modify(change))


def _reason_user(node: Any) -> str:
    """Who set the node's reason: pyslurm's ``reason_user`` (the reason's uid looked up in
    the passwd table Nodes.load read); "" for a uid without a name (pyslurm raises
    KeyError), where the CLI and slurmrestd print slurmctld's own lookup of it."""
    try:
        return str(node.reason_user or "")
    except (KeyError, ValueError, OverflowError):
        return ""


def _key_of(job: Any) -> JobKey:
    """(job id, array id, array task, het id, het offset) of a pyslurm Job."""
    het_id = job.heterogeneous_id or None
    # pyslurm reads het offset 0 (the leader) as None: a het job's leader is offset 0
    het_offset = (job.heterogeneous_offset or 0) if het_id else None
    return int(job.id), job.array_id, job.array_task_id, het_id, het_offset
