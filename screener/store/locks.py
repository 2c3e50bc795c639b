"""Cross-process locks that make concurrent runs safe (issue 11), kept where the results DB is:

- the **actions lock** serialises "read the records, drain/resume in Slurm, record it" across
  every prolog, sweep and `screener resume` sharing a DB, so no two runs drain or resume
  the same node twice and a run's pending drain intents are never settled under it;
- a **node lock** per node, held while that node is probed, so no node is probed by two
  runs at once: a second run waits (within its own budget) and otherwise reports the node
  UNKNOWN "busy: probed by run N" (never drained).

PostgreSQL: advisory locks (they live on a connection, so a killed process releases them);
the actions lock is a transaction-level ``pg_advisory_xact_lock``, node locks are session
``pg_try_advisory_lock`` on one connection per run whose ``application_name`` names the run.
SQLite: ``fcntl.flock`` on files beside the database file (the kernel drops them when the
process dies). An in-memory SQLite DB is one process: no lock is needed or taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import SQLAlchemyError

from screener.errors import StoreError
from screener.store.base import StoreBase
from screener.store.engine import first_line, sqlite_path

ACTIONS_WAIT_S = 60.0  # a drain/resume section takes a few scontrol calls: seconds at most
POLL_S = 0.05  # first retry delay while waiting for a lock; doubles up to POLL_MAX_S
POLL_MAX_S = 0.5
# Advisory-lock key spaces (the two-int4 form): (class, object).
_ACTIONS_KEY = (0x5C7E, 1)
_NODE_CLASS = 0x5C7F

_local = threading.local()  # actions locks this thread holds: key -> depth (re-entrant)


def _node_key(node: str) -> int:
    """A node's advisory-lock object id: non-negative int4 (pg_locks shows it as an oid).
    Two names sharing a key only make one wait for the other: never unsafe."""
    return zlib.crc32(node.encode()) & 0x7FFFFFFF


def _lock_dir(store: StoreBase) -> Path | None:
    """Where the SQLite lock files live (beside the DB file); None: no file, no lock."""
    path = sqlite_path(store.engine.url)
    return None if path is None else path.absolute().parent / f".{path.name}.locks"


def _is_pg(store: StoreBase) -> bool:
    return store.engine.url.get_backend_name() == "postgresql"


def _open_lockfile(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# ---- the actions lock ---------------------------------------------------------------------
@contextlib.contextmanager
def actions_lock(store: StoreBase, wait_s: float = ACTIONS_WAIT_S) -> Iterator[None]:
    """Hold the DB-wide Slurm-actions lock for the block (re-entrant within a process).

    Raises StoreError when another run holds it for more than ``wait_s``: the caller then
    takes no action (a drain not made is safe; one made twice or unrecorded is not).
    """
    held: dict[str, int] = _local.__dict__.setdefault("held", {})
    key = store.where
    depth = held.get(key, 0)
    held[key] = depth + 1
    try:
        if depth:
            yield
        elif _is_pg(store):
            with _pg_actions_lock(store, wait_s):
                yield
        else:
            with _file_actions_lock(store, wait_s):
                yield
    finally:
        held[key] -= 1
        if not held[key]:
            del held[key]


@contextlib.contextmanager
def _pg_actions_lock(store: StoreBase, wait_s: float) -> Iterator[None]:
    conn = None
    try:
        conn = store.engine.connect()
        trans = conn.begin()
        conn.execute(text(f"SET LOCAL lock_timeout = {max(1, int(wait_s * 1000))}"))
        conn.execute(text("SELECT pg_advisory_xact_lock(:c, :o)"), _pair(*_ACTIONS_KEY))
    except SQLAlchemyError as exc:
        if conn is not None:
            with contextlib.suppress(SQLAlchemyError):
                conn.close()
        raise StoreError(_busy_or(exc, wait_s)) from None
    try:
        yield
    finally:
        with contextlib.suppress(SQLAlchemyError):
            trans.rollback()  # ends the transaction: the xact lock goes with it
        with contextlib.suppress(SQLAlchemyError):
            conn.close()


def _busy_or(exc: SQLAlchemyError, wait_s: float) -> str:
    line = first_line(exc)
    if "lock timeout" in line:
        return f"another screener run held the Slurm-actions lock for more than {wait_s:g} s"
    return f"cannot take the Slurm-actions lock: {line}"


@contextlib.contextmanager
def _file_actions_lock(store: StoreBase, wait_s: float) -> Iterator[None]:
    where = _lock_dir(store)
    if where is None:
        yield
        return
    try:
        fd = _open_lockfile(where / "actions.lock")
    except OSError as exc:
        raise StoreError(f"cannot take the Slurm-actions lock in {where}: {exc.strerror}") from None
    try:
        deadline, delay = time.monotonic() + wait_s, POLL_S
        while not _try_flock(fd):
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"another screener run held the Slurm-actions lock for more than {wait_s:g} s"
                )
            time.sleep(delay)
            delay = min(delay * 2, POLL_MAX_S)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def _pair(c: int, o: int) -> dict[str, Any]:
    return {"c": c, "o": o}


# ---- node locks -----------------------------------------------------------------------------
class NodeLocks:
    """Per-node probe locks of one run. ``holder`` names the run to the others ("run 42");
    the pipeline sets it once the run has an id."""

    def __init__(self, store: StoreBase, holder: str = "", wait_s: float = 300.0) -> None:
        self.store = store
        self.holder = holder or f"pid {os.getpid()}"
        self.wait_s = wait_s  # the longest wait when the run has no deadline
        self._pg = _is_pg(store)
        self._dir = None if self._pg else _lock_dir(store)
        self._conn: Connection | None = None
        self._named = ""
        self._fds: dict[str, int] = {}
        self._guard = threading.Lock()  # one PG connection, used from worker threads
        self.broken: str | None = None  # why locking was given up (DB down): probes go on

    @contextlib.asynccontextmanager
    async def hold(self, node: str, stop_at: float | None = None) -> AsyncIterator[str | None]:
        """Hold ``node``'s lock for the block; yields None, or the holder ("run 7") when it
        could not be had before ``stop_at`` (time.monotonic()) or ``wait_s``."""
        limit = time.monotonic() + self.wait_s
        deadline = min(limit, stop_at) if stop_at is not None else limit
        delay = POLL_S
        while not await asyncio.to_thread(self._try, node):
            if time.monotonic() + delay >= deadline:
                yield await asyncio.to_thread(self._holder_of, node) or "another run"
                return
            await asyncio.sleep(delay)  # polling a lock held by another process
            delay = min(delay * 2, POLL_MAX_S)
        try:
            yield None
        finally:
            await asyncio.to_thread(self._release, node)

    def close(self) -> None:
        """Release every lock still held and the lock connection."""
        for node in list(self._fds):
            self._release(node)
        with self._guard:
            if self._conn is not None:
                with contextlib.suppress(SQLAlchemyError):
                    self._conn.close()
                self._conn = None

    # -- backend parts (run in worker threads) --
    def _try(self, node: str) -> bool:
        if self.broken is not None:
            return True
        try:
            return self._try_pg(node) if self._pg else self._try_file(node)
        except (SQLAlchemyError, OSError) as exc:
            # No DB, no lock: results are spooled and the probe must still run.
            self.broken = first_line(exc) if isinstance(exc, SQLAlchemyError) else str(exc)
            return True

    def _try_pg(self, node: str) -> bool:
        with self._guard:
            if self._conn is None:
                self._conn = self.store.engine.connect().execution_options(
                    isolation_level="AUTOCOMMIT"
                )
            if self._named != self.holder:
                self._conn.execute(
                    text("SELECT set_config('application_name', :n, false)"),
                    {"n": f"screener {self.holder}"[:63]},
                )
                self._named = self.holder
            got = self._conn.scalar(
                text("SELECT pg_try_advisory_lock(:c, :o)"), _pair(_NODE_CLASS, _node_key(node))
            )
            return bool(got)

    def _try_file(self, node: str) -> bool:
        if self._dir is None:
            return True
        fd = _open_lockfile(self._dir / f"node-{node}.lock")
        if not _try_flock(fd):
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, self.holder.encode(), 0)
        self._fds[node] = fd
        return True

    def _holder_of(self, node: str) -> str | None:
        with contextlib.suppress(SQLAlchemyError, OSError):
            if not self._pg:
                if self._dir is not None:
                    return (self._dir / f"node-{node}.lock").read_text().strip() or None
                return None
            with self._guard:
                assert self._conn is not None
                name = self._conn.scalar(
                    text(
                        "SELECT a.application_name FROM pg_locks l "
                        "JOIN pg_stat_activity a ON a.pid = l.pid "
                        "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :c "
                        "AND l.objid = :o AND l.objsubid = 2 LIMIT 1"
                    ),
                    _pair(_NODE_CLASS, _node_key(node)),
                )
            return str(name).removeprefix("screener ") if name else None
        return None

    def _release(self, node: str) -> None:
        if self._pg:
            with self._guard, contextlib.suppress(SQLAlchemyError):
                if self._conn is not None and self.broken is None:
                    self._conn.execute(
                        text("SELECT pg_advisory_unlock(:c, :o)"),
                        _pair(_NODE_CLASS, _node_key(node)),
                    )
            return
        fd = self._fds.pop(node, None)
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def probe_locks(store: object | None, wait_s: float = 300.0) -> Iterator[NodeLocks | None]:
    """Node locks for one run (pass to pipeline.screen(locks=...)), released at the end.
    None without a database Store (none configured, or it was down): nothing to lock with."""
    if not isinstance(store, StoreBase):
        yield None
        return
    locks = NodeLocks(store, wait_s=wait_s)
    try:
        yield locks
    finally:
        locks.close()
