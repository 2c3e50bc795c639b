"""Alembic environment for screener.

Called two ways: from screener.store.migrate (the connection, already inside a locked
transaction, arrives in ``config.attributes["connection"]``), or from the ``alembic`` CLI
with the repo-root alembic.ini, where the URL comes from ``-x url=...``, then
SCREENER_DATABASE_URL, then ``sqlalchemy.url``.
"""

from __future__ import annotations

import os
from logging.config import fileConfig
from typing import Any, Literal

from alembic import context
from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

from screener.errors import StoreError
from screener.store.engine import make_engine
from screener.store.migrate import lock_for_migration
from screener.store.tables import Base, UTCDateTime

config = context.config


def render_item(kind: str, obj: Any, autogen: AutogenContext) -> str | Literal[False]:
    """Render our UTCDateTime as the plain type it stores, so migrations do not import models."""
    if kind == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def configure(connection: Connection) -> None:
    """Options shared by upgrades and autogenerate."""
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        compare_type=True,
        render_item=render_item,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
    )


def cli_url() -> str:
    """The URL when run by the alembic CLI."""
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or os.environ.get("SCREENER_DATABASE_URL")
        or config.get_main_option("sqlalchemy.url")
    )
    if not url:
        raise StoreError("no database URL: pass -x url=... or set SCREENER_DATABASE_URL")
    return url


given = config.attributes.get("connection")
if context.is_offline_mode():
    context.configure(url=cli_url(), target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif given is not None:
    configure(given)
    context.run_migrations()
else:
    if config.config_file_name is not None:
        fileConfig(config.config_file_name)
    engine = make_engine(cli_url(), create_dir=True)
    try:
        with engine.begin() as conn:
            lock_for_migration(conn)
            configure(conn)
            context.run_migrations()
    finally:
        engine.dispose()
