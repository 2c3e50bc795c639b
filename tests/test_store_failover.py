"""Failover on real PostgreSQL: a primary and its streaming standby (pg_createcluster +
pg_basebackup, tests/pg_private.py), the store opened with a multi-host URL; the primary
stopped and the standby promoted while threads keep writing runs through SpoolingStore (the
callers' path): every run is stored exactly once, directly or by the spool's replay."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import insert

from screener import spool
from screener.errors import StoreError
from screener.probe_data import Trigger
from screener.store import Store, open_store
from screener.store.engine import describe, parse_url, set_limits
from screener.store.limits import StoreLimits
from screener.store.migrate import upgrade
from screener.store.pg_connect import PgConnection, connect
from screener.store.tables import RunRecord
from tests.pg_private import PgCluster, private_cluster, standby_of

pytestmark = pytest.mark.postgres
LIMITS = StoreLimits(connect_timeout_s=2, connect_wait_s=30, pool_size=4, pool_timeout_s=10)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[PgCluster, PgCluster]]:
    """A migrated primary and a standby that has replayed it."""
    with private_cluster("failover") as pg:
        upgrade(pg.url)
        with standby_of(pg, "failover_sb") as sb:
            yield pg, sb


@pytest.fixture
def limits() -> Iterator[StoreLimits]:
    set_limits(LIMITS)
    yield LIMITS
    set_limits(StoreLimits())


def _run_once(store: Store, spool_dir: Path, where: str, tag: str) -> None:
    """One run as a screen records it: to the DB, or to the spool when the DB fails."""
    rec = spool.SpoolingStore(store, str(spool_dir), tag, db=where)
    now = datetime.now(UTC)
    run_id = rec.start_run(Trigger.MANUAL, ["node01"], {}, None, "node01", now)
    rec.finish_run(run_id, datetime.now(UTC))


def _tags(pg: PgCluster, where: str = "true") -> dict[str, int]:
    """How many rows of ``runs`` each run tag has (``where``: a fixed SQL filter)."""
    sql = f"SELECT policy->>'run_tag', count(*) FROM runs WHERE {where} GROUP BY 1"
    with pg.connect() as conn:
        rows = conn.execute(sql.encode()).fetchall()
    return {str(row[0]): int(str(row[1])) for row in rows}


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``cond`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_failover_stores_every_run_once(
    pair: tuple[PgCluster, PgCluster], limits: StoreLimits, tmp_path: Path
) -> None:
    pg, sb = pair
    url = (
        f"postgresql+psycopg://postgres@/test?host={pg.host}&host={sb.host}"
        "&target_session_attrs=read-write"
    )
    where = describe(parse_url(url))
    assert where == f"{pg.host},{sb.host}/test"
    spool_dir = tmp_path / "spool"
    store = open_store(url)
    done: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        i = 0
        while not stop.is_set():
            tag = f"{name}-{i}"
            try:
                _run_once(store, spool_dir, where, tag)
            except BaseException as exc:  # a crash is the failure tested for
                errors.append(exc)
                return
            done.append(tag)
            i += 1

    threads = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(3)]
    try:
        for t in threads:
            t.start()
        _wait_for(lambda: len(done) >= 15, "runs before the failover")
        # A write in progress when the primary stops: it fails, and it was not committed.
        with pytest.raises(StoreError), store.writing("write across the failover") as conn:
            conn.execute(insert(RunRecord).values(**_raw_run("mid-transaction")))
            pg.stop()
            conn.execute(insert(RunRecord).values(**_raw_run("mid-transaction-2")))
        before = len(done)
        sb.promote()
        _wait_for(lambda: len(done) >= before + 15, "runs after the failover")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    # What was spooled mid-failover is replayed into the new primary (twice: idempotent).
    spooled = len(spool.spool_files(str(spool_dir)))
    half = {  # runs whose start the DB holds and whose rest was spooled (a later write failed)
        f.name.removeprefix("run-").removesuffix(".jsonl")
        for f in map(Path, spool.spool_files(str(spool_dir)))
        if '"db_run_id"' in f.read_text().splitlines()[0]
    }
    for _ in range(2):
        spool.replay(store, str(spool_dir), where, budget_s=None, max_files=None)
    store.close()
    assert spool.spool_files(str(spool_dir)) == []
    tags = _tags(sb)
    assert "mid-transaction" not in tags  # the interrupted transaction never committed
    assert sorted(tags) == sorted(done)  # every run, and nothing else
    # Exactly one row per run, finished: a half-stored run (its start in the DB, the rest
    # spooled) is completed by the replay, never stored again.
    assert tags == dict.fromkeys(done, 1)
    assert _tags(sb, "status = 'done'") == dict.fromkeys(done, 1)
    print(f"runs: {len(done)}, spooled and replayed: {spooled}, of them half-stored: {len(half)}")


def _raw_run(tag: str) -> dict[str, object]:
    return {
        "trigger": "manual",
        "nodeset": "node01",
        "node_count": 1,
        "policy": {"run_tag": tag},
        "started_at": datetime.now(UTC),
        "status": "running",
        "shared_cause": False,
        "shared_cause_reason": "",
        "screener_version": "test",
    }


def test_commit_outcome_is_learnt_from_the_primary(pair: tuple[PgCluster, PgCluster]) -> None:
    """How an in-doubt COMMIT is resolved: txid_status on whichever server is primary."""
    primary = next(c for c in pair if c.is_up() and not c.in_recovery())
    params = {"host": "127.0.0.1", "port": primary.port, "user": "postgres", "dbname": "test"}
    conn: PgConnection = connect(LIMITS, params)
    with conn:
        conn.execute("CREATE TEMP TABLE t (x int)")
        conn.commit()
        assert conn._xid() is None  # no transaction: nothing in doubt
        conn.execute("SELECT 1")
        assert conn._xid() is None  # a read-only transaction has no xid
        conn.execute("INSERT INTO t VALUES (1)")
        committed = conn._xid()
        conn.commit()
        conn.execute("INSERT INTO t VALUES (2)")
        aborted = conn._xid()
        conn.rollback()
        assert committed is not None and aborted is not None
        assert conn._outcome(committed) == "committed"
        assert conn._outcome(aborted) == "aborted"
        assert conn._outcome(committed + 1_000_000) == "lost"  # never reached this server
    with pytest.raises(psycopg.OperationalError):
        connect(LIMITS, {**params, "port": 1})  # refused outright: no wait
