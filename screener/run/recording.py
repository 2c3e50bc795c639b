"""Where one run's results go: the store (opened here unless given) or, when its server does
not answer, the spool; the run's live marker meanwhile; spooled runs replayed after."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence

from screener import run_marker, spool
from screener.errors import StoreError
from screener.pipeline import ScreenResult
from screener.policy import Policy, database_url
from screener.store import Store, open_store
from screener.store.engine import describe, parse_url


@contextlib.contextmanager
def recorded_run(
    nodes: Sequence[str],
    policy: Policy,
    tag: str,
    *,
    store: Store | None = None,
    db_unavailable: str | None = None,
    enabled: bool = True,
    replay: bool = True,
) -> Iterator[spool.SpoolingStore | None]:
    """Where one run's results go (screen, prolog, sweep): the DB, opened here unless given
    (a server that does not answer means the spool), with the run's live marker; after a
    run the DB stored, earlier spooled runs are replayed unless ``replay`` is false (the
    prolog replays after its decision, within its budget). None when ``enabled`` is
    false."""
    url = database_url(policy)
    where = describe(parse_url(url))
    spool_dir = policy.store.spool_dir
    db: Store | None = store
    recorder: spool.SpoolingStore | None = None
    if enabled:
        reason = db_unavailable or ""
        try:
            if db is None and db_unavailable is None:
                db = open_store(url, upgrade=url.startswith("sqlite"))
        except StoreError as exc:
            if url.startswith("sqlite"):  # a local file: a path/permission mistake, not an outage
                raise
            reason = str(exc)  # a server that does not answer: spool, decide anyway

        def started(run_id: int) -> None:  # a killed run is then marked failed by the next
            run_marker.mark_live(spool_dir, tag, nodes, policy.transport.kind, run_id)

        recorder = spool.SpoolingStore(db, spool_dir, tag, reason, on_started=started, db=where)
    marker = run_marker.mark_live(spool_dir, tag, nodes, policy.transport.kind)
    try:
        yield recorder
        if replay and db is not None and not (recorder and recorder.spooled):
            with contextlib.suppress(StoreError):  # earlier spooled runs, now the DB is back
                spool.replay(db, spool_dir, where)
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)
        if db is not None and store is None:  # ours to close; a caller's stays open
            db.close()


def settled(result: ScreenResult, recorder: spool.SpoolingStore | None) -> ScreenResult:
    """``result`` with the recorder's outcome: the DB run id, or why the run was spooled
    (or lost) as ``store_error`` — a caller must not act on a run the DB does not hold."""
    if recorder is not None and recorder.lost is not None:
        return dataclasses.replace(result, run_id=recorder.run_id, store_error=str(recorder.lost))
    if recorder is not None and recorder.spooled:
        note = f"database unavailable ({recorder.reason}); {spool.SPOOLED_NOTE} {recorder.path}"
        return dataclasses.replace(result, run_id=recorder.run_id, store_error=note)
    return result
