"""A run killed with SIGKILL is finished by a later run, and its live marker stays until that
is really done (issue 19, item 9): a later run whose database is down (a PostgreSQL URL on a
closed port) cannot mark the killed run failed, so it must keep the marker; the next run
that reaches the database marks the run failed and only then removes the marker.

The real console script screens this machine (local transport, real fio); the killed run is
a DB run left "running" with a marker naming a process that no longer exists.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from screener.probe_data import Trigger
from screener.spool import SpoolingStore
from screener.store import open_store
from tests import cli_fork

DB_DOWN = "postgresql+psycopg://screener@127.0.0.1:1/screener"  # nothing listens on port 1


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def killed_run(tmp_path: Path, db: Path) -> tuple[int, Path]:
    """A run stored 'running' whose process is gone, with its live marker in the spool."""
    spool_dir = tmp_path / "spool"
    uid = "20250101000000-0123456789ab"
    with open_store(f"sqlite:///{db}", upgrade=True) as store:
        run_id = SpoolingStore(store, str(spool_dir), uid).start_run(
            Trigger.MANUAL, ["n1"], {}, None, "n1", datetime.now(UTC)
        )
    spool_dir.mkdir(mode=0o700, exist_ok=True)
    marker = spool_dir / f"live-{uid}.json"
    doc = {
        "uid": uid,
        "pid": dead_pid(),
        "start": "1",
        "nodes": [socket.gethostname()],
        "transport": "local",
        "run_id": run_id,
    }
    marker.write_text(json.dumps(doc))
    return run_id, marker


def screen(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    target = tmp_path / "target"
    target.mkdir(exist_ok=True)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[probe]\nsize_mib = 16\nruntime_s = 0.3\nramp_s = 0\nrand_read = false\n"
        f'[store]\nspool_dir = "{tmp_path}/spool"\n'
    )
    return cli_fork.run(
        ["--config", str(cfg), "screen", "--local", "--target", str(target)],
        timeout=120,
        env={**os.environ, "SCREENER_DATABASE_URL": url},
    )


def status(db: Path, run_id: int) -> str:
    with sqlite3.connect(db) as con:
        (s,) = con.execute("select status from runs where id = ?", (run_id,)).fetchone()
    return str(s)


def test_the_marker_of_a_killed_run_stays_while_the_database_is_down(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    run_id, marker = killed_run(tmp_path, db)
    down = screen(tmp_path, DB_DOWN)
    assert down.returncode in (0, 3), down.stderr  # spooled: a warning, not an error
    assert "spooled" in down.stderr
    assert marker.exists(), "removed although its run could not be marked failed"
    assert status(db, run_id) == "running"
    up = screen(tmp_path, f"sqlite:///{db}")
    assert up.returncode in (0, 3), up.stderr
    assert status(db, run_id) == "failed"
    assert not marker.exists()
    assert not list((tmp_path / "spool").glob("live-*"))


def test_a_marker_whose_run_never_reached_the_database_goes_at_once(tmp_path: Path) -> None:
    # No DB run id (killed before its run was stored, or spooled): nothing to mark.
    db = tmp_path / "db.sqlite"
    _, marker = killed_run(tmp_path, db)
    doc = json.loads(marker.read_text())
    marker.write_text(json.dumps({**doc, "run_id": None}))
    down = screen(tmp_path, DB_DOWN)
    assert down.returncode in (0, 3), down.stderr
    assert not marker.exists()
