"""Store writes of the spool's replay (screener.spool) that must happen once however many
replayers run. A spool file is replayed in one transaction (:func:`one_transaction`: all of
it or, after a crash or an error, none of it), under an advisory lock on its run tag on
PostgreSQL (SQLite's BEGIN IMMEDIATE already serialises writers), so a second replayer
waits, then finds everything stored. A node event (a drain made while the database was
down, with its slow episode) is also checked for and inserted under a per-node lock."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, func, select, text

from screener.probe_data import Trigger
from screener.store import convert
from screener.store.base import aware, ensure_nodes, run_started
from screener.store.drain_intents import open_episode_in
from screener.store.engine import translated
from screener.store.store import Store, insert_event
from screener.store.tables import (
    EventRecord,
    JobIngestRecord,
    NodeProbeRecord,
    NodeRecord,
    RunRecord,
    VerdictRecord,
)

_REPLAY_CLASS = 0x5C80  # advisory-lock class of replayed events (locks.py uses 0x5C7E/F)
_FILE_CLASS = 0x5C81  # advisory-lock class of a replayed spool file (its run tag or job)


def _lock(conn: Connection, cls: int, name: str) -> None:
    """A transaction-scoped advisory lock on (cls, name) on PostgreSQL; nothing on SQLite."""
    if conn.dialect.name == "postgresql":
        key = zlib.crc32(name.encode()) & 0x7FFFFFFF
        conn.execute(text("SELECT pg_advisory_xact_lock(:c, :o)"), {"c": cls, "o": key})


class _InTransaction(Store):
    """A Store whose every read and write runs on one connection, in its open transaction."""

    def __init__(self, store: Store, conn: Connection) -> None:
        super().__init__(store.engine)
        self._conn = conn

    @contextmanager
    def writing(self, doing: str) -> Iterator[Connection]:
        with translated(doing):
            yield self._conn

    @contextmanager
    def reading(self, doing: str) -> Iterator[Connection]:
        with translated(doing):
            yield self._conn

    def close(self) -> None:  # the engine is the caller's store's
        return


@contextmanager
def one_transaction(store: Store, doing: str, key: str) -> Iterator[Store]:
    """``store`` as one write transaction for the block, holding the advisory lock of
    ``key`` (a run tag, a job id): committed when the block ends, rolled back on any error,
    so a replay cut short (killed, the database gone again) leaves nothing of itself."""
    with store.writing(doing) as conn:
        _lock(conn, _FILE_CLASS, key)
        yield _InTransaction(store, conn)


def stored_probes(store: Store, run_id: int) -> set[tuple[str, int]]:
    """(node, round) of every probe of ``run_id`` the store holds."""
    query = (
        select(NodeRecord.name, NodeProbeRecord.round)
        .join(NodeRecord, NodeRecord.id == NodeProbeRecord.node_id)
        .where(NodeProbeRecord.run_id == run_id)
    )
    with store.reading(f"look up the probes of run {run_id}") as conn:
        return {(str(name), int(rnd)) for name, rnd in conn.execute(query)}


def has_verdicts(store: Store, run_id: int) -> bool:
    """Are the verdicts of ``run_id`` stored (they are written in one transaction)?"""
    query = select(VerdictRecord.id).where(VerdictRecord.run_id == run_id).limit(1)
    with store.reading(f"look up the verdicts of run {run_id}") as conn:
        return conn.scalar(query) is not None


def run_finish(store: Store, run_id: int) -> tuple[str, datetime | None]:
    """(status, finished_at) of ``run_id``."""
    query = select(RunRecord.status, RunRecord.finished_at).where(RunRecord.id == run_id)
    with store.reading(f"look up run {run_id}") as conn:
        row = conn.execute(query).one()
    return str(row[0]), None if row[1] is None else aware_utc(row[1])


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
        _lock(conn, _REPLAY_CLASS, name)
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
        insert_event(conn, node_id, when, action, reason, run_id, slurm_reason, job_id)
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
