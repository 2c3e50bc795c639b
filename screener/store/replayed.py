"""Store writes of the spool's replay (screener.spool) that must happen once however many
replayers run: a node event (a drain made while the database was down, with its slow
episode) is checked for and inserted in one transaction, under a per-node advisory lock on
PostgreSQL (SQLite's BEGIN IMMEDIATE already serialises writers), so two replayers that
both check before either inserts cannot both insert."""

from __future__ import annotations

import zlib
from datetime import datetime

from sqlalchemy import func, insert, select, text

from screener.probe_data import Trigger
from screener.store import convert
from screener.store.base import aware, ensure_nodes, run_started
from screener.store.drain_intents import open_episode_in
from screener.store.store import Store
from screener.store.tables import EventRecord, JobIngestRecord

_REPLAY_CLASS = 0x5C80  # advisory-lock class of replayed events (locks.py uses 0x5C7E/F)


def record_event_once(
    store: Store,
    node: str,
    action: str,
    reason: str,
    at: datetime,
    run_id: int | None,
    slurm_reason: str | None,
    job_id: str | None = None,
    episode: Trigger | None = None,
) -> bool:
    """Insert the node event unless one of the same node, action, time and Slurm reason is
    stored (a replay run before); with ``episode``, open the node's slow episode too (a
    drain), in the same transaction. True when it was inserted now."""
    name = convert.node_name(node)
    when = aware(at, "at")
    with store.writing(f"replay the {action} event of {name}") as conn:
        if conn.dialect.name == "postgresql":
            key = zlib.crc32(name.encode()) & 0x7FFFFFFF
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:c, :o)"), {"c": _REPLAY_CLASS, "o": key}
            )
        if run_id is not None:
            run_started(conn, run_id)
        node_id = ensure_nodes(conn, [name], when, touch=False)[name]
        same = select(EventRecord.id).where(
            EventRecord.node_id == node_id,
            EventRecord.action == action,
            EventRecord.at == when,
            EventRecord.slurm_reason.is_(None)
            if slurm_reason is None
            else EventRecord.slurm_reason == slurm_reason,
        )
        if conn.scalar(same.limit(1)) is not None:
            return False
        conn.execute(
            insert(EventRecord).values(
                node_id=node_id,
                at=when,
                action=action,
                reason=reason,
                run_id=run_id,
                slurm_reason=slurm_reason,
                job_id=job_id,
            )
        )
        if episode is not None:
            open_episode_in(conn, node_id, episode, when, reason, run_id, job_id)
        return True


def newest_ingest(store: Store, job_id: str) -> datetime | None:
    """When the newest stored ingest of ``job_id`` observed the job's I/O (None: none)."""
    with store.reading(f"look up the ingests of job {job_id}") as conn:
        newest = conn.scalar(
            select(func.max(JobIngestRecord.observed_at)).where(JobIngestRecord.job_id == job_id)
        )
    return None if newest is None else aware_utc(newest)


def aware_utc(value: datetime) -> datetime:
    """SQLite hands back naive UTC datetimes; PostgreSQL aware ones."""
    from datetime import UTC

    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
