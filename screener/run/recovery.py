"""Finish what killed runs left: their processes on the nodes, their runs in the store."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from screener import run_marker, spool
from screener.policy import Policy
from screener.transport.base import Transport
from screener.transport.cleanup import CLEANUP_TIMEOUT_S, kill_tagged


async def recover(transport: Transport, policy: Policy, store: spool.SpoolingStore | None) -> None:
    """Finish the bookkeeping of screens that were killed (SIGKILL, reboot): stop what they
    left running on their nodes, mark their runs failed, then drop their live markers (a
    marker stays until its run is marked, e.g. while the database is down)."""
    spool_dir = policy.store.spool_dir
    for path, doc in run_marker.stale_runs(spool_dir):
        tag, stale_nodes = str(doc.get("uid", "")), [str(n) for n in doc.get("nodes", [])]
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLEANUP_TIMEOUT_S + 2):
                await kill_tagged(transport, stale_nodes, tag)
        db = store.store if store is not None else None
        if run_marker.finish_stale(db, doc, datetime.now(UTC)):
            path.unlink(missing_ok=True)  # kept while the DB is down: the next run finishes it
