"""PostgreSQL connections that follow a failover and stay bounded under load.

- **Connecting** waits a bounded time (``connect_wait_s``) while the server answers "too
  many clients" or no listed host is a writable primary yet (a failover in progress), then
  fails; a server that refuses outright fails at once (an outage: the caller spools).
- **An in-doubt COMMIT** (the connection dropped while committing) is resolved on the
  primary with ``txid_status``: committed is success, so the caller does not spool a write
  the database holds (no duplicate on replay); anything else is an error as before.
- **A write on a read-only server** invalidates the connection, so the next transaction
  gets a fresh one from libpq's host list.
- **A deadline** (a prolog's budget, :meth:`StoreLimits.until`): no connect attempt is
  started that could end past it, and no retry waits past it.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import psycopg

from screener.store.limits import MIN_CONNECT_TIMEOUT_S, StoreLimits

# Messages of a connection attempt worth retrying within connect_wait_s: the server is at
# max_connections, or a failover has not yet produced a writable primary.
_TRANSIENT = (
    "too many clients",
    "remaining connection slots are reserved",
    "is read-only",
    "hot standby",
    "not a primary",
    "in recovery",
    "is starting up",
    "is shutting down",
    "not yet accepting connections",
)
READ_ONLY_SQLSTATE = "25006"  # cannot execute INSERT in a read-only transaction
NO_TIME = "no time left in the hook's budget to connect to the database"


def transient(exc: BaseException) -> bool:
    """A connect failure that a moment's wait may cure (busy server, failover under way)."""
    text = str(exc).lower()
    return any(t in text for t in _TRANSIENT)


def _in_time(limits: StoreLimits, cparams: dict[str, Any]) -> dict[str, Any]:
    """``cparams`` with a connect_timeout that lets every listed host be tried before the
    limits' deadline; OperationalError (not transient) when not even the shortest can."""
    if limits.deadline is None:
        return cparams
    hosts = max(len(str(cparams.get("host") or "").split(",")), 1)
    left = limits.deadline - time.monotonic()
    given = int(cparams.get("connect_timeout") or math.ceil(limits.connect_timeout_s))
    each = min(given, math.floor(left / hosts))
    if each < MIN_CONNECT_TIMEOUT_S:
        raise psycopg.OperationalError(NO_TIME)
    return {**cparams, "connect_timeout": each}


def _end(limits: StoreLimits, wait_s: float) -> float:
    """When a wait of ``wait_s`` from now must end: then, or the deadline if sooner."""
    end = time.monotonic() + wait_s
    return end if limits.deadline is None else min(end, limits.deadline)


def connect(limits: StoreLimits, cparams: dict[str, Any]) -> PgConnection:
    """A PgConnection, retrying transient failures for up to ``limits.connect_wait_s``
    (never past ``limits.deadline``: then the last failure is raised)."""
    deadline = _end(limits, limits.connect_wait_s)
    pause = 0.05
    last: psycopg.OperationalError | None = None
    while True:
        try:
            params = _in_time(limits, cparams)
        except psycopg.OperationalError:
            if last is not None:  # what kept us waiting says more than "no time left"
                raise last from None
            raise
        try:
            conn = PgConnection.connect(**params)
        except psycopg.OperationalError as exc:
            left = deadline - time.monotonic()
            if not transient(exc) or left <= 0:
                raise
            last = exc
            time.sleep(min(left, pause * random.uniform(0.5, 1.5)))  # jitter: bursts spread
            pause = min(pause * 2, 1.0)
            continue
        conn.limits = limits
        conn.cparams = cparams
        return conn


class InDoubtCommit(psycopg.OperationalError):
    """The COMMIT's outcome could not be learnt: the connection dropped while committing and
    no primary answered within connect_wait_s."""


class PgConnection(psycopg.Connection[Any]):
    """A psycopg connection whose commit() resolves an interrupted COMMIT (see module)."""

    limits: StoreLimits = StoreLimits()
    cparams: dict[str, Any] = {}  # noqa: RUF012 (set per instance by connect())

    def commit(self) -> None:
        xid = self._xid()  # an error here is before COMMIT: certainly not committed
        try:
            super().commit()
        except psycopg.OperationalError:
            if xid is None or not self.closed:
                raise  # nothing written, or a server-side error the server reported
            if self._outcome(xid) == "committed":
                return  # the database holds it: success, nothing to spool or retry
            raise

    def rollback(self) -> None:
        if self.closed:  # after a resolved COMMIT: the pool finds it dead at next checkout
            return
        super().rollback()

    def _xid(self) -> int | None:
        """The transaction's id if it has written anything (a read-only one has none)."""
        if self.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
            return None
        row = self.execute("SELECT txid_current_if_assigned()").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _outcome(self, xid: int) -> str:
        """committed / aborted / lost (unknown to the new primary: its WAL never got there).
        InDoubtCommit when no primary answers within connect_wait_s."""
        deadline = _end(self.limits, self.limits.connect_wait_s)
        while True:
            try:
                with connect(self.limits, self.cparams) as conn:
                    conn.autocommit = True
                    row = conn.execute("SELECT txid_status(%s)", (xid,)).fetchone()
                status = None if row is None else row[0]
                if status != "in progress":  # the old session's COMMIT may still be landing
                    return str(status or "lost")
            except psycopg.errors.InvalidParameterValue:  # "transaction ID ... in the future"
                return "lost"
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise InDoubtCommit(
                        f"the outcome of a commit is unknown (the connection dropped while "
                        f"committing, and no primary answered: {str(exc).strip()})"
                    ) from exc
            if time.monotonic() > deadline:
                raise InDoubtCommit("the outcome of a commit is unknown (still in progress)")
            time.sleep(0.1)
