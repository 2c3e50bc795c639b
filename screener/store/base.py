"""What every part of the Store shares: the engine, one-transaction read/write helpers,
and the row helpers (UTC checks, ids, node upserts) that writers in other modules reuse."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from sqlalchemy import (
    ARRAY,
    Connection,
    CursorResult,
    Engine,
    Text,
    any_,
    bindparam,
    select,
    update,
)
from sqlalchemy.dialects import sqlite

from screener.errors import StoreError
from screener.probe_data import RunSummary
from screener.store import convert
from screener.store.engine import (
    describe,
    translated,
)
from screener.store.tables import (
    NodeRecord,
    RunRecord,
)

JOB_ID_MAX = 64  # runs.job_id; Slurm ids such as "123456_7" or "4242+1" are far shorter


def aware(value: datetime, what: str) -> datetime:
    """Refuse naive datetimes: the store is UTC throughout and must not guess a zone."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(f"{what} must be a timezone-aware datetime, got {value.isoformat()}")
    return value


def positive(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StoreError(f"{what} must be a positive integer, got {value!r}")
    return value


def new_id(result: CursorResult[Any]) -> int:
    """The primary key an INSERT .. VALUES just created."""
    key = result.inserted_primary_key
    if key is None:  # cannot happen for our single-row inserts
        raise StoreError("the database did not return the new row's id")
    return int(key[0])


def run_started(conn: Connection, run_id: int) -> datetime:
    """The run's start time; StoreError if there is no such run."""
    started = conn.scalar(select(RunRecord.started_at).where(RunRecord.id == run_id))
    if started is None:
        raise StoreError(f"run {run_id} does not exist")
    return started


def ensure_nodes(
    conn: Connection, names: Sequence[str], seen: datetime, *, touch: bool
) -> dict[str, int]:
    """Ids of ``names``, inserting new nodes; ``touch`` moves last_seen forward to ``seen``.

    INSERT .. ON CONFLICT DO NOTHING (both backends) so concurrent runs meeting the same
    new node do not collide on the unique name.
    """
    unique = sorted(set(names))
    if not unique:
        return {}
    pg = conn.dialect.name == "postgresql"
    # PostgreSQL: one array parameter; a 10,000-name IN list costs psycopg seconds to bind
    named = (
        NodeRecord.name == any_(bindparam("names", unique, type_=ARRAY(Text())))
        if pg
        else NodeRecord.name.in_(unique)
    )
    ids = {
        name: int(i)
        for name, i in conn.execute(select(NodeRecord.name, NodeRecord.id).where(named))
    }
    new = [n for n in unique if n not in ids]  # a sweep of a known fleet inserts nothing
    if new:
        rows = [{"name": n, "first_seen": seen, "last_seen": seen} for n in new]
        if pg:  # the PostgreSQL dialect's module only where it serves (~30 ms to import)
            from sqlalchemy.dialects import postgresql

            conn.execute(
                postgresql.insert(NodeRecord).on_conflict_do_nothing(index_elements=["name"]),
                rows,
            )
        else:
            conn.execute(
                sqlite.insert(NodeRecord).on_conflict_do_nothing(index_elements=["name"]), rows
            )
        new_named = NodeRecord.name.in_(new)
        ids |= {
            n: int(i)
            for n, i in conn.execute(select(NodeRecord.name, NodeRecord.id).where(new_named))
        }
    if touch:
        conn.execute(
            update(NodeRecord).where(named, NodeRecord.last_seen < seen).values(last_seen=seen)
        )
    return ids


class StoreBase:
    """An SQLAlchemy Engine (SQLite or PostgreSQL, migrated to head) and its transactions."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.where = describe(engine.url)  # for messages: file path or host:port/db

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def writing(self, doing: str) -> Iterator[Connection]:
        """One write transaction (SQLite: BEGIN IMMEDIATE); commit on success, else roll back.
        Database errors become StoreError("cannot <doing>: ...")."""
        with translated(doing), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def reading(self, doing: str) -> Iterator[Connection]:
        """A read-only transaction that does not take SQLite's write lock."""
        with read_only(self.engine, doing) as conn:
            yield conn


@contextmanager
def read_only(engine: Engine, doing: str) -> Iterator[Connection]:
    """A read transaction that does not take SQLite's write lock; database errors become
    StoreError("cannot <doing>: ...")."""
    with translated(doing), engine.connect() as conn:
        conn.execution_options(sqlite_begin="DEFERRED")
        with conn.begin():
            yield conn


def record_run_outcome(conn: Connection, run_id: int, summary: RunSummary) -> None:
    """The run-level flags of a judged run (shared cause, peer medians) on its runs row."""
    conn.execute(
        update(RunRecord)
        .where(RunRecord.id == run_id)
        .values(
            shared_cause=summary.shared_cause,
            shared_cause_reason=summary.shared_cause_reason,
            peer_read_median_mb_s=convert.figure(summary.peer_read_median_mb_s),
            peer_rand_median_iops=convert.figure(summary.peer_rand_median_iops),
        )
    )
