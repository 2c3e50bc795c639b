"""`screener db upgrade|current`: the database schema."""

from __future__ import annotations

import argparse

from rich.console import Console

from screener.cli.common import Subparsers
from screener.policy import load_policy


def register(sub: Subparsers) -> None:
    db = sub.add_parser("db", help="database schema")
    db.add_argument("action", choices=["upgrade", "current"])
    db.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener.policy import database_url
    from screener.store.migrate import current_revision, upgrade

    url = database_url(load_policy(args.config))
    revision = upgrade(url) if args.action == "upgrade" else current_revision(url)
    console.print(
        f"database at revision {revision}"
        if revision
        else "database is not initialised: run `screener db upgrade`"
    )
    return 0
