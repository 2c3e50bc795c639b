"""Which schema revision a database is at, and which one this code needs, without importing
Alembic (it costs a few hundred ms of start-up, and every prolog hook opens the store):
the revision graph is read from the migration files themselves, so there is no second,
hand-kept copy of the head. Alembic is loaded only to migrate (migrate.py)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from sqlalchemy import Connection, inspect, text

from screener.errors import StoreError
from screener.store.engine import screener_version

# Shipped inside the package (package-data in pyproject.toml), so a wheel install can
# migrate; the repository's top-level `migrations` is a symlink here for the alembic CLI.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "alembic_version"
_REVISION = re.compile(r"""^revision(?:: str)? = ["']([^"']+)["']""", re.M)
_DOWN = re.compile(r"""^down_revision(?:: [^=]+)? = (?:["']([^"']+)["']|None)""", re.M)


@cache
def revision_graph() -> dict[str, str | None]:
    """Every revision in migrations/versions mapped to its parent (None for the first)."""
    graph: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        rev, down = _REVISION.search(source), _DOWN.search(source)
        if rev is None or down is None:
            raise StoreError(f"migration {path.name} has no revision/down_revision line")
        graph[rev.group(1)] = down.group(1)
    return graph


@cache
def schema_head() -> str:
    """The newest revision: the one no other revision names as its parent."""
    graph = revision_graph()
    heads = set(graph) - {d for d in graph.values() if d is not None}
    if len(heads) != 1:
        raise StoreError(
            f"migrations in {MIGRATIONS_DIR} must form one chain, found heads {sorted(heads)}"
        )
    return heads.pop()


def stamped_revision(conn: Connection) -> str | None:
    """The revision Alembic stamped in the database, None if it was never migrated."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    rev = conn.scalar(text(f"SELECT version_num FROM {VERSION_TABLE}"))
    return None if rev is None else str(rev)


def check_current(conn: Connection, where: str) -> None:
    """StoreError unless the database is at the revision this code expects."""
    rev = stamped_revision(conn)
    head = schema_head()
    if rev == head:
        return
    if rev is None:
        raise StoreError(f"database at {where} is not initialised: run `screener db upgrade`")
    if rev in revision_graph():
        raise StoreError(
            f"database at {where} is at schema revision {rev}, screener needs {head}: "
            "run `screener db upgrade`"
        )
    raise StoreError(
        f"database at {where} has schema revision {rev}, unknown to screener "
        f"{screener_version()} (written by a newer version?)"
    )
