"""Two-phase drains in the store (issue 11): the intent ("drain_pending", exact reason)
before ``scontrol``, the drain (+ slow episode) after, the intents no later event settled,
and their settling by the next run. SlurmRecords inherits these; hooks/drains.py uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, insert, select

from screener.probe_data import Trigger
from screener.store import convert
from screener.store.base import aware, ensure_nodes, run_started
from screener.store.store import Store
from screener.store.tables import EpisodeRecord, EventRecord, NodeRecord, RunRecord

# The events that settle a drain intent ("drain_pending"): whichever of these is a node's
# latest says whether an intent is still open.
_DRAIN_PHASES = ("drain_pending", "drain", "drain_failed", "drain_abandoned")


@dataclass(frozen=True)
class PendingDrain:
    """A drain intent no later event settled: its run was killed around ``scontrol``."""

    node: str
    reason: str  # the exact reason the run was about to give Slurm
    at: datetime
    run_id: int | None
    trigger: Trigger
    job_id: str | None


class DrainIntents:
    """The two-phase drain records of one Store (SQLite or PostgreSQL)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def intend_drain(self, node: str, reason: str, at: datetime, run_id: int | None) -> None:
        """Phase 1, before ``scontrol``: a "drain_pending" event carrying the exact reason."""
        self.store.record_event(node, "drain_pending", "about to drain", at, run_id, reason)

    def record_drain(
        self,
        node: str,
        reason: str,
        at: datetime,
        run_id: int | None,
        trigger: Trigger,
        job_id: str | None,
        episode: bool = True,
    ) -> None:
        """Phase 2, after ``scontrol`` drained ``node``: the "drain" event (which settles the
        intent) and the slow episode (none for a node drained only to be checked: ``episode``
        False), in one transaction."""
        name = convert.node_name(node)
        when = aware(at, "at")
        with self.store.writing(f"record the drain of {name}") as conn:
            if run_id is not None:
                run_started(conn, run_id)
            node_id = ensure_nodes(conn, [name], when, touch=False)[name]
            _event(conn, node_id, when, "drain", reason, run_id, reason)
            if episode:
                open_episode_in(conn, node_id, trigger, when, reason, run_id, job_id)

    def pending_drains(self, nodes: Sequence[str] | None = None) -> list[PendingDrain]:
        """Intents not settled by a later drain / drain_failed / drain_abandoned event."""
        query = (
            select(
                NodeRecord.name,
                EventRecord.action,
                EventRecord.at,
                EventRecord.run_id,
                EventRecord.slurm_reason,
                RunRecord.trigger,
                RunRecord.job_id,
            )
            .join(NodeRecord, NodeRecord.id == EventRecord.node_id)
            .outerjoin(RunRecord, RunRecord.id == EventRecord.run_id)
            .where(EventRecord.action.in_(_DRAIN_PHASES))
            .order_by(NodeRecord.name, EventRecord.at.desc(), EventRecord.id.desc())
        )
        if nodes is not None:
            query = query.where(NodeRecord.name.in_(list(nodes)))
        with self.store.reading("read drain intents") as conn:
            rows = conn.execute(query).all()
        out: list[PendingDrain] = []
        seen: set[str] = set()
        for r in rows:
            if r.name in seen:
                continue
            seen.add(r.name)
            if r.action == "drain_pending":
                trigger = Trigger(r.trigger) if r.trigger else Trigger.MANUAL
                out.append(
                    PendingDrain(r.name, r.slurm_reason or "", r.at, r.run_id, trigger, r.job_id)
                )
        return out

    def settle_drain(self, pending: PendingDrain, issued: bool, why: str, at: datetime) -> None:
        """Finish an intent: "drain" + episode if Slurm carries it out, else "drain_abandoned".

        Stamped no earlier than the intent, so it is the node's latest event even when this
        host's clock is behind the one that wrote the intent."""
        name = convert.node_name(pending.node)
        when = max(aware(at, "at"), aware(pending.at, "intent time"))
        with self.store.writing(f"settle the drain intent of {name}") as conn:
            node_id = ensure_nodes(conn, [name], when, touch=False)[name]
            if issued:
                _event(conn, node_id, when, "drain", why, pending.run_id, pending.reason)
                open_episode_in(
                    conn,
                    node_id,
                    pending.trigger,
                    aware(pending.at, "intent time"),
                    pending.reason,
                    pending.run_id,
                    pending.job_id,
                )
            else:
                _event(conn, node_id, when, "drain_abandoned", why, pending.run_id, pending.reason)


def _event(
    conn: Connection,
    node_id: int,
    at: datetime,
    action: str,
    reason: str,
    run_id: int | None,
    slurm_reason: str | None,
) -> None:
    conn.execute(
        insert(EventRecord).values(
            node_id=node_id,
            at=at,
            action=action,
            reason=reason,
            run_id=run_id,
            slurm_reason=slurm_reason,
        )
    )


def open_episode_in(
    conn: Connection,
    node_id: int,
    trigger: Trigger,
    at: datetime,
    reason: str,
    run_id: int | None,
    job_id: str | None,
) -> bool:
    """Start a slow episode unless one is open (inside the caller's transaction)."""
    open_id = conn.scalar(
        select(EpisodeRecord.id).where(
            EpisodeRecord.node_id == node_id, EpisodeRecord.ended_at.is_(None)
        )
    )
    if open_id is not None:
        return False
    conn.execute(
        insert(EpisodeRecord).values(
            node_id=node_id,
            trigger=Trigger(trigger).value,
            started_at=at,
            start_run_id=run_id,
            job_id=job_id,
            reason=reason[:500],
        )
    )
    return True
