"""Opening a Store: connect, migrate the embedded SQLite on first use, refuse a database
that is not at this code's schema head (Alembic is imported only to migrate)."""

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import (
    Connection,
    Engine,
)
from sqlalchemy.exc import SQLAlchemyError

from screener.errors import StoreError
from screener.store.engine import (
    describe,
    first_line,
    make_engine,
    sqlite_path,
)
from screener.store.limits import StoreLimits
from screener.store.revision import check_current, schema_head, stamped_revision
from screener.store.store import Store


def open_store(
    url: str, *, upgrade: bool = False, readonly: bool = False, limits: StoreLimits | None = None
) -> Store:
    """A Store for ``url``; with ``upgrade`` first migrate to head (creating an SQLite file
    and its directory), else refuse a database that is not at head. ``readonly`` (queries)
    opens an SQLite file without ever changing it. PostgreSQL waits within ``limits``
    (default: the [store] keys of the policy this process loaded, engine.limits_in_force)."""
    ro = readonly and not upgrade
    engine = make_engine(url, create_dir=upgrade, readonly=ro, limits=limits)
    try:
        if upgrade and _revision(engine) != schema_head():
            from screener.store.migrate import upgrade_engine  # Alembic only when needed

            upgrade_engine(engine)
        _check_ready(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine)


@contextmanager
def _connected(engine: Engine) -> Iterator[Connection]:
    """A connection; failing to get one is 'cannot connect to/open database at X: why'."""
    path = sqlite_path(engine.url)
    verb = "open" if path is not None else "connect to"
    try:
        with engine.connect() as conn:
            yield conn
    except SQLAlchemyError as exc:
        where = describe(engine.url)
        raise StoreError(f"cannot {verb} database at {where}: {first_line(exc)}") from exc


def _revision(engine: Engine) -> str | None:
    """The stamped revision, None for a database (or SQLite file) that does not exist yet."""
    path = sqlite_path(engine.url)
    if path is not None and not path.exists():
        return None
    with _connected(engine) as conn:
        return stamped_revision(conn)


def _check_ready(engine: Engine) -> None:
    """Connect once and compare the schema revision with head."""
    where = describe(engine.url)
    path = sqlite_path(engine.url)
    if path is not None and not path.exists():  # do not leave an empty file behind
        raise StoreError(f"database at {where} is not initialised: run `screener db upgrade`")
    with _connected(engine) as conn:
        check_current(conn, where)
