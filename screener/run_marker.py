"""Live markers: which screens are running here, so that one killed with SIGKILL (or a
reboot) is finished by the next run: its tagged processes killed, its run marked failed.

One file per run, ``<spool_dir>/live-<tag>.json`` (mode 0600): pid, process start time
(tells a reused pid apart), nodes, transport, DB run id once known.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from screener.errors import StoreError
from screener.process import start_time
from screener.spool import LIVE_PREFIX, _Store, is_live

# The marker's name and the liveness test live in the spool (a replayer asks them there).
__all__ = ["LIVE_PREFIX", "finish_stale", "is_live", "mark_live", "stale_runs"]


def mark_live(
    spool_dir: str, uid: str, nodes: Sequence[str], transport: str, run_id: int | None = None
) -> Path | None:
    """Record that this process is screening ``nodes`` under tag ``uid`` (removed at the end).

    A run killed with SIGKILL cannot clean up; the next run finds this file, sees the pid is
    gone, kills what the run left on its nodes and marks its run failed. None when the
    spool directory is not writable (the screen goes on without the marker).
    """
    d = Path(spool_dir)
    path = d / f"{LIVE_PREFIX}{uid}.json"
    doc = {
        "uid": uid,
        "pid": os.getpid(),
        "start": start_time(os.getpid()),
        "nodes": list(nodes),
        "transport": transport,
        "run_id": run_id,
    }
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(doc).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:  # an admin without write access to the spool: no SIGKILL recovery
        return None
    return path


def stale_runs(spool_dir: str) -> list[tuple[Path, dict[str, Any]]]:
    """Live markers whose process is gone (killed, or the machine rebooted)."""
    d = Path(spool_dir)
    if not d.is_dir():
        return []
    out = []
    for path in sorted(d.glob(f"{LIVE_PREFIX}*.json")):
        try:
            doc = json.loads(path.read_text())
            pid = int(doc["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if start_time(pid) is None or start_time(pid) != doc.get("start"):
            out.append((path, doc))
    return out


def finish_stale(store: _Store | None, doc: dict[str, Any], at: datetime) -> bool:
    """Mark the DB run of a killed screen failed, unless it got to finish (the spool file, if
    any, is replayed separately and closes its own run). True once the run's bookkeeping is
    done, so its marker may go; False while the database that holds the run cannot be
    reached or refuses the write (``store`` None: the DB is down), so the next run retries.
    """
    run_id = doc.get("run_id")
    if not (isinstance(run_id, int) and run_id > 0):
        return True  # the DB never held the run: nothing to mark
    if store is None:
        return False
    try:
        found = store.spooled_run(str(doc["uid"]), None)
        if found is not None and found[1] == "running":
            store.finish_run(found[0], at, "failed")
    except StoreError:
        return False
    return True
