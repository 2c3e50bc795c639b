"""Bounded under load, on a real PostgreSQL with few connections (tests/pg_private.py): 32
store users at once each end within the configured wait, having stored their run or raised
StoreError (which callers spool); none hangs, none crashes; the rows are exactly the runs
that said they were stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from screener.errors import StoreError
from screener.probe_data import Trigger
from screener.store import Store, open_store
from screener.store.engine import make_engine, set_limits
from screener.store.limits import StoreLimits
from screener.store.migrate import upgrade
from tests.pg_private import PgCluster, private_cluster

pytestmark = pytest.mark.postgres
USERS = 32
LIMITS = StoreLimits(connect_timeout_s=2, connect_wait_s=3, pool_size=2, pool_timeout_s=1)
SLACK_S = 3.0  # thread start and scheduling on a loaded 2-core machine


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    with private_cluster("pool", max_connections="8", superuser_reserved_connections="0") as pg:
        upgrade(pg.url)
        yield pg


@pytest.fixture
def limits() -> Iterator[StoreLimits]:
    set_limits(LIMITS)
    yield LIMITS
    set_limits(StoreLimits())


def _burst(fn: Callable[[str], None]) -> tuple[dict[str, str], float]:
    """Run ``fn(tag)`` in USERS threads at once: each tag's outcome, and the longest time."""
    outcome: dict[str, str] = {}
    took: list[float] = []
    go = threading.Barrier(USERS)

    def user(tag: str) -> None:
        go.wait()
        t0 = time.monotonic()
        try:
            fn(tag)
            outcome[tag] = "stored"
        except StoreError as exc:
            outcome[tag] = f"StoreError: {exc}"
        except BaseException as exc:  # a crash is what this test looks for
            outcome[tag] = f"CRASH {type(exc).__name__}: {exc}"
        took.append(time.monotonic() - t0)

    threads = [threading.Thread(target=user, args=(f"u{i}",)) for i in range(USERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a store user hangs"
    return outcome, max(took)


def _one_run(store: Store, tag: str) -> None:
    now = datetime.now(UTC)
    run_id = store.start_run(Trigger.PROLOG, ["node01"], {"run_tag": tag}, "1", "node01", now)
    store.finish_run(run_id, datetime.now(UTC))


def _hook(url: str, tag: str) -> None:
    """What one prolog does with the store: open it, write its run, close it."""
    with open_store(url) as store:
        _one_run(store, tag)


def _stored(pg: PgCluster) -> set[str]:
    with pg.connect() as conn:
        rows = conn.execute("SELECT policy->>'run_tag' FROM runs WHERE status = 'done'")
        return {str(r[0]) for r in rows}


def _hold(pg: PgCluster, n: int, stack: ExitStack) -> None:
    """Take ``n`` of the server's connections (as other clients would) until the stack closes."""
    for _ in range(n):
        stack.enter_context(pg.connect())


def _clear(pg: PgCluster) -> None:
    with pg.connect() as conn:
        conn.execute("DELETE FROM runs")


def test_a_full_server_fails_every_hook_in_bounded_time(pg: PgCluster, limits: StoreLimits) -> None:
    _clear(pg)
    with ExitStack() as stack:
        _hold(pg, 8, stack)  # max_connections: nothing left
        outcome, longest = _burst(lambda tag: _hook(pg.url, tag))
    assert all(o.startswith("StoreError") for o in outcome.values()), outcome
    assert any("too many clients" in o for o in outcome.values()), outcome
    assert LIMITS.connect_wait_s <= longest <= LIMITS.connect_wait_s + SLACK_S
    assert _stored(pg) == set()
    print(f"full server: {USERS} StoreErrors, longest {longest:.2f} s")


def test_few_free_connections_each_hook_writes_or_fails_bounded(
    pg: PgCluster, limits: StoreLimits
) -> None:
    _clear(pg)
    with ExitStack() as stack:
        _hold(pg, 6, stack)  # two of eight left for 32 hooks
        outcome, longest = _burst(lambda tag: _hook(pg.url, tag))
    crashes = [o for o in outcome.values() if not o.startswith(("stored", "StoreError"))]
    assert not crashes, crashes
    stored = {t for t, o in outcome.items() if o == "stored"}
    assert stored and _stored(pg) == stored  # each run that said stored, and no other
    bound = LIMITS.connect_wait_s + LIMITS.connect_timeout_s + SLACK_S
    assert longest <= bound, f"a hook took {longest:.2f} s"
    print(f"2 free connections: {len(stored)}/{USERS} stored, longest {longest:.2f} s")


def test_one_process_pool_waits_bounded(pg: PgCluster) -> None:
    """Threads of one process share pool_size connections; the rest wait pool_timeout_s."""
    _clear(pg)
    store = Store(make_engine(pg.url, limits=LIMITS))

    def slow_write(tag: str) -> None:
        with store.writing("hold a pooled connection") as conn:
            conn.execute(text("SELECT pg_sleep(0.5)"))
        _one_run(store, tag)

    try:
        outcome, longest = _burst(slow_write)
    finally:
        store.close()
    errors = [o for o in outcome.values() if o.startswith("StoreError")]
    assert errors and all("QueuePool limit" in o for o in errors), outcome
    assert len(errors) + sum(o == "stored" for o in outcome.values()) == USERS, outcome
    assert longest <= LIMITS.pool_timeout_s + 2 * 0.5 + SLACK_S


def test_until_bounds_each_wait_by_a_share_of_the_time_left() -> None:
    now = time.monotonic()
    long = StoreLimits().until(now + 600)
    assert (long.connect_timeout_s, long.connect_wait_s, long.pool_timeout_s) == (5, 10, 10)
    short = StoreLimits().until(now + 8)  # a 10 s prolog budget: 8 s left for the store
    assert short.connect_wait_s <= 2 and short.pool_timeout_s <= 2
    assert short.connect_timeout_s == 2 and short.deadline == now + 8  # libpq's least
    assert short.until(now + 4).deadline == now + 4
    assert StoreLimits().until(now - 1).connect_wait_s == 0


def test_a_deadline_bounds_a_hooks_wait_on_a_full_server(pg: PgCluster) -> None:
    """A prolog's store (StoreLimits.until its budget) gives up on a full server within
    the deadline, however long connect_wait_s is, and one past its deadline never connects."""
    _clear(pg)
    patient = StoreLimits(connect_timeout_s=5, connect_wait_s=60, pool_size=1, pool_timeout_s=60)
    with ExitStack() as stack:
        _hold(pg, 8, stack)
        t0 = time.monotonic()
        with pytest.raises(StoreError, match="too many clients"):
            open_store(pg.url, limits=patient.until(t0 + 3.0, share=1.0))
        took = time.monotonic() - t0
    assert took <= 3.0 + 0.5, f"waited {took:.2f} s past a 3 s deadline"
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="no time left in the hook's budget"):
        open_store(pg.url, limits=patient.until(t0 + 1.0))  # a free server, but no time
    assert time.monotonic() - t0 < 0.5
    print(f"full server, 3 s deadline: gave up after {took:.2f} s")
