"""`screener spool replay|list`: results kept locally while the database was down."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from screener.cli.common import Subparsers
from screener.policy import database_url, load_policy


def register(sub: Subparsers) -> None:
    s = sub.add_parser("spool", help="results spooled while the database was unreachable")
    ssub = s.add_subparsers(dest="spool_command", required=True)
    r = ssub.add_parser("replay", help="store every spooled run in the DB (idempotent)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler=run)
    ls = ssub.add_parser("list", help="spooled runs (with their drains) and ingests not yet stored")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener import spool
    from screener.errors import StoreError
    from screener.store import open_store
    from screener.store.engine import describe, parse_url

    policy = load_policy(args.config)
    spool_dir = policy.store.spool_dir
    url = database_url(policy)
    where = describe(parse_url(url))
    if args.spool_command == "list":
        files = spool.spool_files(spool_dir, where) + spool.ingest_files(spool_dir, where)
        if args.json:
            print(json.dumps([str(p) for p in files]))
        else:
            lines = [f"{p}: {_holds(spool.waiting(p))}" for p in files]
            console.print("\n".join(lines) or f"no run spooled for {where} in {spool_dir}")
        return 0
    with open_store(url, upgrade=url.startswith("sqlite")) as store:
        done = spool.replay(store, spool_dir, where, max_files=None, budget_s=None)
    if args.json:
        print(json.dumps([r.__dict__ for r in done]))
    else:
        for r in done:
            console.print(f"{r.path}: {r.outcome}" + (f" (run {r.run_id})" if r.run_id else ""))
        if not done:
            console.print(f"no run spooled for {where} in {spool_dir}")
    failed = [r for r in done if r.outcome.startswith("error")]
    if failed:
        raise StoreError(f"{len(failed)} spooled run(s) not replayed: {failed[0].outcome}")
    return 0


def _holds(counts: dict[str, int]) -> str:
    """e.g. ``1 run, 2 drain events`` or ``1 ingest``."""
    return ", ".join(
        f"{n} {k[:-1] if n == 1 and k.endswith('s') else k}" for k, n in counts.items()
    )
