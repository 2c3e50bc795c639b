"""`screener db upgrade|current` on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import os
import subprocess

from screener.store.revision import schema_head
from tests import cli_fork

pytest_plugins = ["store_fixtures"]  # fixtures: db_backend, empty_db_url, pg_dbs


def db(action: str, url: str) -> subprocess.CompletedProcess[str]:
    return cli_fork.run(
        ["db", action], timeout=120, env={**os.environ, "SCREENER_DATABASE_URL": url}
    )


def test_db_current_then_upgrade_then_current(empty_db_url: str) -> None:
    before = db("current", empty_db_url)
    assert before.returncode == 0, before.stderr
    assert "not initialised" in before.stdout
    up = db("upgrade", empty_db_url)
    assert up.returncode == 0, up.stderr
    assert f"database at revision {schema_head()}" in up.stdout
    again = db("upgrade", empty_db_url)  # idempotent
    assert again.returncode == 0 and schema_head() in again.stdout
    assert schema_head() in db("current", empty_db_url).stdout
