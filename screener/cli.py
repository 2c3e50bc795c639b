"""The `screener` command: parse, call, print. No decisions are made here.

Exit codes: 0 screen done and no node SLOW; 3 screen done and at least one node SLOW;
1 error (one line on stderr; with --local also when this machine could not be probed);
2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console

from screener import __version__
from screener.errors import ScreenerError, StoreError
from screener.model import Trigger
from screener.policy import load_policy

EXIT_SLOW = 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="screener", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"screener {__version__}")
    p.add_argument("--config", help="policy TOML (default /etc/screener/screener.toml)")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("screen", help="probe nodes and judge them against their peers")
    s.add_argument("nodeset", nargs="?", help="ClusterShell NodeSet, e.g. 'node[01-08]'")
    s.add_argument("--local", action="store_true", help="screen this machine (no SSH)")
    s.add_argument("--target", help="directory on the local NVMe filesystem to probe")
    s.add_argument("--transport", choices=["asyncssh", "fabric", "local"])
    s.add_argument("--no-confirm", action="store_true", help="do not re-probe suspects")
    s.add_argument("--no-store", action="store_true", help="do not write the run to the DB")
    s.add_argument("--job-id", help="Slurm job id this screen belongs to")
    s.add_argument("--trigger", choices=[t.value for t in Trigger], default="manual")
    s.add_argument("--json", action="store_true", help="print JSON only")

    r = sub.add_parser("runs", help="latest runs with their verdict counts")
    r.add_argument("--limit", type=int, default=20)
    r.add_argument("--json", action="store_true")

    h = sub.add_parser("history", help="one node's verdicts, newest first")
    h.add_argument("node")
    h.add_argument("--limit", type=int, default=20)
    h.add_argument("--json", action="store_true")

    f = sub.add_parser("flaky", help="nodes that flipped between OK and SLOW")
    f.add_argument("--days", type=float, default=7.0, help="window (default 7 days)")
    f.add_argument("--min-transitions", type=int, default=2)
    f.add_argument("--json", action="store_true")

    db = sub.add_parser("db", help="database schema")
    db.add_argument("action", choices=["upgrade", "current"])
    return p


def _screen(args: argparse.Namespace, console: Console) -> int:
    from screener import app, report

    policy = app.screen_policy(
        load_policy(args.config),
        local=args.local,
        target=args.target,
        transport=args.transport,
        confirm=not args.no_confirm,
    )
    nodes = app.resolve_nodes(args.nodeset, args.local)
    with report.progress(console, len(nodes), enabled=not args.json) as on_done:
        result = app.run_screen(
            nodes,
            policy,
            trigger=Trigger(args.trigger),
            job_id=args.job_id,
            store_results=not args.no_store,
            on_done=on_done,
        )
    if args.json:
        print(report.result_json(result))
    else:
        report.print_result(result, console)
    if result.store_error:  # the figures are printed above; say they were not all stored
        raise StoreError(f"results above not stored: {result.store_error}")
    if args.local and (failure := report.local_failure(result)):
        raise ScreenerError(failure)  # screening this machine failed: say why, exit 1
    return EXIT_SLOW if report.any_slow(result) else 0


def _query(args: argparse.Namespace, console: Console) -> int:
    from screener import app, report
    from screener.nodes import validate_node

    policy = load_policy(args.config)
    rows: Sequence[object]
    with app.open_results(policy) as store:
        if args.command == "runs":
            title, rows = "latest runs", store.latest_runs(args.limit)
        elif args.command == "history":
            node = validate_node(args.node)
            title, rows = f"history of {node}", store.node_history(node, args.limit)
        else:
            since = app.flaky_since(args.days)
            title = f"flaky nodes, last {args.days:g} days"
            rows = store.flaky_nodes(since, args.min_transitions)
    if args.json:
        print(report.rows_json(rows))
    else:
        console.print(report.rows_table(title, rows))
    return 0


def _db(args: argparse.Namespace, console: Console) -> int:
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `screener` console script."""
    args = _parser().parse_args(argv)
    # Piped output (logs, `| less`) gets a wide table instead of rich's 80-column default.
    console = Console(width=None if sys.stdout.isatty() else 200)
    try:
        if args.command == "screen":
            return _screen(args, console)
        if args.command in ("runs", "history", "flaky"):
            return _query(args, console)
        return _db(args, console)
    except ScreenerError as exc:
        print(f"screener: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("screener: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
