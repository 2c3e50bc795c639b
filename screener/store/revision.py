"""Which schema revision a database is at, without importing Alembic (it costs a few hundred
ms of start-up, and every prolog hook opens the store): Alembic is loaded only to migrate."""

from __future__ import annotations

from sqlalchemy import Connection, inspect, text

from screener.errors import StoreError
from screener.store.engine import screener_version

SCHEMA_HEAD = "0003a"  # newest file in migrations/versions; a test keeps the two in step
VERSION_TABLE = "alembic_version"


def stamped_revision(conn: Connection) -> str | None:
    """The revision Alembic stamped in the database, None if it was never migrated."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    rev = conn.scalar(text(f"SELECT version_num FROM {VERSION_TABLE}"))
    return None if rev is None else str(rev)


def check_current(conn: Connection, where: str) -> None:
    """StoreError unless the database is at the revision this code expects."""
    rev = stamped_revision(conn)
    if rev == SCHEMA_HEAD:
        return
    if rev is None:
        raise StoreError(f"database at {where} is not initialised: run `screener db upgrade`")
    from screener.store.migrate import known_revisions  # rare path: Alembic is fine here

    if rev in known_revisions():
        raise StoreError(
            f"database at {where} is at schema revision {rev}, screener needs {SCHEMA_HEAD}: "
            "run `screener db upgrade`"
        )
    raise StoreError(
        f"database at {where} has schema revision {rev}, unknown to screener "
        f"{screener_version()} (written by a newer version?)"
    )
