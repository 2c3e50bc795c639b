"""Alembic, driven from Python: no alembic.ini needed at run time.

The whole upgrade runs in one transaction, so a failed migration leaves the old schema.
Concurrent upgrades (several prolog hooks meeting a fresh database) are serialised: SQLite
by BEGIN IMMEDIATE (see engine.py), PostgreSQL by a transaction-scoped advisory lock; the
later ones then find the schema at head and do nothing.
"""

from __future__ import annotations

import threading

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, select, text

from screener.errors import StoreError
from screener.store.engine import describe, make_engine, sqlite_path, translated
from screener.store.revision import MIGRATIONS_DIR, stamped_revision

PG_MIGRATION_LOCK = 0x5C7EE7E5  # arbitrary, fixed key for pg_advisory_xact_lock
# Alembic runs env.py through module-global proxies (alembic.context, alembic.op), so two
# upgrades in one process must not overlap. Taken before the database lock, never after.
_IN_PROCESS = threading.Lock()


def alembic_config() -> Config:
    """A Config pointing at migrations/; the connection is handed over in ``attributes``."""
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise StoreError(f"database migrations not found at {MIGRATIONS_DIR}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def lock_for_migration(conn: Connection) -> None:
    """Serialise concurrent upgrades on PostgreSQL (released at commit/rollback)."""
    if conn.dialect.name == "postgresql":
        conn.execute(select(text(f"pg_advisory_xact_lock({PG_MIGRATION_LOCK})")))


def upgrade_engine(engine: Engine) -> str:
    """Migrate the database behind ``engine`` to head in one transaction; return the revision."""
    cfg = alembic_config()
    where = describe(engine.url)
    with _IN_PROCESS, translated(f"upgrade the database at {where}"), engine.begin() as conn:
        lock_for_migration(conn)
        cfg.attributes["connection"] = conn
        try:
            command.upgrade(cfg, "head")
        except CommandError as exc:  # e.g. the database is at a revision we do not know
            raise StoreError(f"cannot upgrade the database at {where}: {exc}") from exc
        rev = stamped_revision(conn)
    return rev or ""


def upgrade(url: str) -> str:
    """`screener db upgrade`: create (SQLite: with its directory) or migrate to head."""
    engine = make_engine(url, create_dir=True)
    try:
        return upgrade_engine(engine)
    finally:
        engine.dispose()


def current_revision(url: str) -> str | None:
    """`screener db current`: the database's schema revision, None if not initialised."""
    engine = make_engine(url)
    path = sqlite_path(engine.url)
    if path is not None and not path.exists():  # do not create an empty file just to look
        engine.dispose()
        return None
    try:
        where = describe(engine.url)
        with translated(f"read the schema revision at {where}"), engine.connect() as conn:
            return stamped_revision(conn)
    finally:
        engine.dispose()
