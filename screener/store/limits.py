"""How long a PostgreSQL store may wait, apart from psycopg: a process on the embedded SQLite
store (the first-run default) never imports the PostgreSQL driver (~0.1 s of every CLI
call and hook), and the prolog computes its limits before it knows which store it has."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace
from typing import Any

MIN_CONNECT_TIMEOUT_S = 2  # libpq's connect_timeout: whole seconds, 1 counts as 2


@dataclass(frozen=True)
class StoreLimits:
    """How long a PostgreSQL store may wait, and how many connections a process holds
    ([store] keys of the same names, docs/configuration.md)."""

    connect_timeout_s: float = 5.0  # one host's connect attempt (libpq connect_timeout)
    connect_wait_s: float = 10.0  # retry a busy server or a failover in progress this long
    pool_size: int = 4  # connections one process keeps; more threads wait for one
    pool_timeout_s: float = 10.0  # how long a thread waits for a pooled connection
    deadline: float | None = None  # time.monotonic() no connect may end past (until())

    @classmethod
    def from_policy(cls, store: Any) -> StoreLimits:
        """The limits of a ``[store]`` section (any object with these attributes)."""
        names = [f.name for f in fields(cls) if f.name != "deadline"]
        return cls(**{n: getattr(store, n) for n in names if hasattr(store, n)})

    def until(self, deadline: float, share: float = 0.25) -> StoreLimits:
        """These limits for a caller that must be done by ``deadline`` (time.monotonic()):
        no connect ends past it, and no one wait (connect retries, a pooled connection)
        takes more than ``share`` of the time left now, leaving the rest to the work."""
        cap = max(deadline - time.monotonic(), 0.0) * share
        return replace(
            self,
            connect_timeout_s=min(self.connect_timeout_s, max(cap, MIN_CONNECT_TIMEOUT_S)),
            connect_wait_s=min(self.connect_wait_s, cap),
            pool_timeout_s=min(self.pool_timeout_s, cap),
            deadline=deadline if self.deadline is None else min(deadline, self.deadline),
        )
