"""Fixtures for the store tests: one SQLite file or one fresh PostgreSQL database per test.

PostgreSQL: each test session creates its own databases named ``screener_test_<pid>_<hex>``
through the admin database (SCREENER_TEST_PG_URL, default the ``test`` DB as ``postgres``)
and drops them at the end; leftovers of crashed sessions (their pid no longer alive) are
dropped at the start. An unreachable server FAILS the tests unless SCREENER_SKIP_PG=1.
Test modules load this file with ``pytest_plugins = ["store_fixtures"]``; the plain data
helpers are in store_data.py.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from screener.store import Store, open_store
from screener.store.migrate import upgrade

PG_ADMIN_URL = os.environ.get(
    "SCREENER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
PREFIX = "screener_test_"

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class PgDatabases:
    """Creates throw-away databases on the real server and drops them all at the end."""

    admin_url: str
    created: list[str]

    def url(self, name: str) -> str:
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def _admin(self, sql: str) -> None:
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(sql))
        finally:
            engine.dispose()

    def create(self, template: str | None = None) -> str:
        """A new empty database (or a copy of ``template``); returns its URL."""
        name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self._admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        self.created.append(name)
        return self.url(name)

    def drop_all(self) -> None:
        for name in self.created:
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.created.clear()

    def drop_stale(self) -> None:
        """Drop databases left by crashed sessions (name carries a pid that is gone)."""
        engine = create_engine(self.admin_url)
        try:
            with engine.connect() as conn:
                names = conn.scalars(
                    text("SELECT datname FROM pg_database WHERE datname LIKE :p"),
                    {"p": PREFIX + "%"},
                ).all()
        finally:
            engine.dispose()
        for name in names:
            m = re.fullmatch(rf"{PREFIX}(\d+)_[0-9a-f]+", name)
            if m and not _pid_alive(int(m.group(1))):
                self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_dbs() -> Iterator[PgDatabases]:
    """The PostgreSQL test server; reachable, or the test fails (SCREENER_SKIP_PG=1 skips)."""
    if os.environ.get("SCREENER_SKIP_PG") == "1":
        pytest.skip("SCREENER_SKIP_PG=1")
    dbs = PgDatabases(PG_ADMIN_URL, [])
    try:
        dbs.drop_stale()
    except Exception as exc:  # any failure here means "no usable server"
        pytest.fail(
            f"PostgreSQL at {make_url(PG_ADMIN_URL).render_as_string()} is not usable "
            f"({exc.__class__.__name__}: {str(exc).splitlines()[0]}); start it (`make postgres`)"
            " or set SCREENER_SKIP_PG=1",
            pytrace=False,
        )
    yield dbs
    dbs.drop_all()


@pytest.fixture(scope="session")
def pg_template(pg_dbs: PgDatabases) -> str:
    """Name of a database migrated to head once per session, cloned for each test."""
    url = pg_dbs.create()
    upgrade(url)
    return make_url(url).database or ""


@pytest.fixture(params=BACKENDS)
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def empty_db_url(db_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """URL of a fresh, empty, never-migrated database on ``db_backend``."""
    if db_backend == "sqlite":
        return f"sqlite:///{tmp_path / 'screener.db'}"
    pg_dbs: PgDatabases = request.getfixturevalue("pg_dbs")
    return pg_dbs.create()


@pytest.fixture
def db_url(db_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """URL of a fresh database at head on ``db_backend``."""
    if db_backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'screener.db'}"
        upgrade(url)
        return url
    pg_dbs: PgDatabases = request.getfixturevalue("pg_dbs")
    return pg_dbs.create(template=request.getfixturevalue("pg_template"))


@pytest.fixture
def db_store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    yield s
    s.close()
