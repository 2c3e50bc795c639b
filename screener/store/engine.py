"""Database URLs and engines: validation, per-backend settings, one-line error messages.

Only SQLite (embedded default) and PostgreSQL via psycopg 3 are supported: those are the
two backends the schema is tested on.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from screener.errors import StoreError
from screener.policy import redact_url, store_in_force
from screener.store.limits import StoreLimits

SQLITE_BUSY_TIMEOUT_S = 30.0  # concurrent prolog hooks queue for the write lock this long
EXAMPLES = "sqlite:////var/lib/screener/screener.db or postgresql+psycopg://USER@HOST:5432/DB"
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)
_limits: StoreLimits | None = None  # set_limits(): overrides the loaded policy's [store]
_DRIVERS = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
    "postgresql": "postgresql+psycopg",  # SQLAlchemy's default (psycopg2) is not installed
    "postgresql+psycopg": "postgresql+psycopg",
}


def screener_version() -> str:
    """The installed screener version (stored with each run)."""
    try:
        return importlib.metadata.version("screener")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def redact(url: str) -> str:
    """The URL with any password replaced by ***, for messages (works on unparseable URLs);
    libpq also takes ``?password=...``, hidden too."""
    return _QUERY_PASSWORD.sub(r"\1***", redact_url(url))


def parse_url(url: str) -> URL:
    """Parse and normalise a database URL; StoreError if it is malformed or unsupported."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        msg = f"database URL {redact(url)!r} is not valid; expected {EXAMPLES}"
        raise StoreError(msg) from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise StoreError(
            f"database driver {parsed.drivername!r} is not supported; expected {EXAMPLES}"
        )
    if parsed.host and "@" in parsed.host:
        # An unencoded '@' in the password: the driver would try to resolve the password's
        # tail as a host name and print it. Refuse before anything connects.
        raise StoreError(
            f"database URL {redact(url)!r} has an unencoded '@' in its user or password: "
            "write it as %40"
        )
    return parsed.set(drivername=driver)


def describe(url: URL) -> str:
    """Where the database is, for messages: a file path, or host:port/db (never a password);
    a multi-host URL (``?host=a:5432&host=b:5432``) is ``a:5432,b:5432/db``."""
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return f"{','.join(hosts(url))}/{url.database or ''}"


def hosts(url: URL) -> list[str]:
    """``host:port`` of every server a PostgreSQL URL lists, in libpq's order: the URL's
    host, or the query's ``host`` (repeated, or libpq's ``a,b``) with ``port`` (``p1,p2``)."""
    names = [url.host] if url.host else _query_list(url, "host")
    ports = [str(url.port)] if url.port else _query_list(url, "port")
    if not names:
        names = ["localhost"]
    out = []
    for i, name in enumerate(names):
        host, port = _host_port(name)
        port = port or (ports[min(i, len(ports) - 1)] if ports else "5432")
        out.append(f"{host or 'localhost'}:{port}")
    return out


def _host_port(name: str) -> tuple[str, str]:
    """``h:5432`` -> (h, 5432); ``[::1]:5432`` -> ([::1], 5432); a bare name or address -> ''."""
    if name.startswith("["):
        addr, _, rest = name.partition("]")
        return addr + "]", rest.lstrip(":")
    if name.count(":") == 1:
        host, _, port = name.partition(":")
        return host, port
    return name, ""


def _query_list(url: URL, key: str) -> list[str]:
    value = url.query.get(key)
    items = [value] if isinstance(value, str) else list(value or ())
    return [part for item in items for part in item.split(",") if part]


def multi_host(url: URL) -> bool:
    """True for a URL naming more than one server (libpq follows a failover across them)."""
    return url.get_backend_name() == "postgresql" and len(hosts(url)) > 1


def set_limits(limits: StoreLimits | None) -> None:
    """Limits for every engine this process makes from now on, instead of those of the
    policy it loaded (None: back to those)."""
    global _limits
    _limits = limits


def limits_in_force() -> StoreLimits:
    """What an engine made without explicit limits uses: set_limits()'s, else the [store]
    keys of the policy this process loaded (load_policy: every command and hook), else the
    defaults."""
    return _limits if _limits is not None else StoreLimits.from_policy(store_in_force())


def sqlite_path(url: URL) -> Path | None:
    """The file of an SQLite URL, or None for in-memory and ``file:`` URI databases."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database or ""
    if db in ("", ":memory:") or db.startswith("file:"):
        return None
    return Path(db)


def check_sqlite_path(path: Path, *, create_dir: bool, readonly: bool = False) -> None:
    """Refuse a database file whose directory is missing or not writable (SQLite's own
    message is only "unable to open database file"). WAL needs the directory writable too.
    A read-only open only needs the file readable (a copy on a read-only mount is fine)."""
    try:
        if readonly:
            _check_readable(path)
        else:
            _check_sqlite_path(path, create_dir=create_dir)
    except OSError as exc:  # e.g. a parent directory we may not even look into
        raise StoreError(f"cannot use database path {path}: {exc.strerror}") from None


def _check_readable(path: Path) -> None:
    parent = path.absolute().parent
    if path.is_dir():
        raise StoreError(f"database path {path} is a directory, not a file")
    if not parent.is_dir():
        raise StoreError(f"database directory {parent} does not exist: run `screener db upgrade`")
    if path.exists() and not os.access(path, os.R_OK):
        raise StoreError(f"database file {path} is not readable")


def _check_sqlite_path(path: Path, *, create_dir: bool) -> None:
    parent = path.absolute().parent
    if path.is_dir():
        raise StoreError(f"database path {path} is a directory, not a file")
    if not parent.exists():
        if not create_dir:
            raise StoreError(
                f"database directory {parent} does not exist: run `screener db upgrade`"
            )
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create database directory {parent}: {exc.strerror}") from None
    if not parent.is_dir():
        raise StoreError(f"database directory {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"database directory {parent} is not writable")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise StoreError(f"database file {path} is not readable and writable")


def make_engine(
    url: str, *, create_dir: bool = False, readonly: bool = False, limits: StoreLimits | None = None
) -> Engine:
    """An Engine for ``url`` with our per-backend settings; nothing is connected yet.

    ``readonly`` (admin queries) opens an SQLite file with ``mode=ro``: it never changes the
    file (no WAL switch, no -wal/-shm on a read-only mount) and never waits for a writer.
    PostgreSQL: ``limits`` (default: limits_in_force()) bound the connect and the pool.
    """
    parsed = parse_url(url)
    path = sqlite_path(parsed)
    if path is not None:
        check_sqlite_path(path, create_dir=create_dir, readonly=readonly)
    # NaN is not JSON and PostgreSQL refuses it; refuse it on SQLite too, to match.
    kwargs: dict[str, Any] = {"json_serializer": functools.partial(json.dumps, allow_nan=False)}
    lim = limits or limits_in_force()
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
        if readonly and path is not None:
            kwargs["creator"] = functools.partial(_connect_readonly, path)
    else:
        if "connect_timeout" not in parsed.query:  # libpq: whole seconds, at least 2
            kwargs["connect_args"] = {"connect_timeout": max(2, math.ceil(lim.connect_timeout_s))}
        kwargs["pool_pre_ping"] = True  # a dead connection (restart, failover) is replaced
        kwargs |= {
            "pool_size": lim.pool_size,
            "max_overflow": 0,
            "pool_timeout": lim.pool_timeout_s,
        }
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"database driver {parsed.drivername!r} is not usable: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        _sqlite_events(engine, wal=path is not None and not readonly)
    else:
        _pg_events(engine, lim)
    return engine


def _pg_events(engine: Engine, limits: StoreLimits) -> None:
    """Connections through pg_connect (bounded waits, in-doubt commits resolved); a write
    refused as read-only (a server demoted under us) retires its connection. psycopg is
    imported here, for a PostgreSQL store only."""
    from screener.store import pg_connect

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _rec: Any, cargs: tuple[Any, ...], cparams: dict[str, Any]) -> Any:
        if cargs:  # SQLAlchemy's psycopg dialect passes keywords only
            raise StoreError("unexpected positional connect arguments")
        return pg_connect.connect(limits, cparams)

    @event.listens_for(engine, "handle_error")
    def _read_only(ctx: ExceptionContext) -> None:
        if getattr(ctx.original_exception, "sqlstate", None) == pg_connect.READ_ONLY_SQLSTATE:
            ctx.is_disconnect = True


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only SQLite connection; ``immutable`` when the directory is read-only (then no
    -shm file can exist or be created, and nothing can change the file under us)."""
    from urllib.parse import quote

    flags = "mode=ro" if os.access(path.absolute().parent, os.W_OK) else "immutable=1"
    return sqlite3.connect(
        f"file:{quote(str(path.absolute()))}?{flags}",
        uri=True,
        timeout=SQLITE_BUSY_TIMEOUT_S,
        check_same_thread=False,
    )


def _sqlite_events(engine: Engine, *, wal: bool) -> None:
    """Real transactions on SQLite: foreign keys on, WAL, and BEGIN IMMEDIATE for writes.

    pysqlite's legacy mode starts transactions late, so two writers that both read first
    deadlock with "database is locked" at once, ignoring the busy timeout. BEGIN IMMEDIATE
    takes the write lock up front, so concurrent writers queue instead.
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys = ON")  # off by default in SQLite
        # WAL: readers do not block the writer. Only switched when not WAL yet: setting it
        # takes a lock, so doing it on every connect made each command wait for any writer
        # in progress (the 7-10 s stall before an error on a busy default database).
        if wal and cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            cur.execute("PRAGMA journal_mode = WAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {'DEFERRED' if mode == 'DEFERRED' else 'IMMEDIATE'}")


def first_line(exc: BaseException) -> str:
    """The driver's own message, first line only, without SQLAlchemy's SQL dump."""
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0].strip() if lines else type(orig).__name__


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """Turn any database error inside the block into one StoreError line: 'cannot DOING: why'."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot {doing}: {first_line(exc)}") from exc
