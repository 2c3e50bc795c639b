"""Admin queries over the store: `runs`, `history NODE`, `flaky`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rich.console import Console

from screener.cli.common import Subparsers, check_count, check_days, check_limit
from screener.policy import load_policy


def register(sub: Subparsers) -> None:
    r = sub.add_parser("runs", help="latest runs with their verdict counts")
    r.add_argument("--limit", type=int, default=20)
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler=run)

    h = sub.add_parser("history", help="one node's verdicts, newest first")
    h.add_argument("node")
    h.add_argument("--limit", type=int, default=20)
    h.add_argument("--json", action="store_true")
    h.set_defaults(handler=run)

    f = sub.add_parser("flaky", help="nodes that flipped between OK and SLOW")
    f.add_argument("--days", type=float, default=7.0, help="window (default 7 days)")
    f.add_argument("--min-transitions", type=int, default=2)
    f.add_argument("--json", action="store_true")
    f.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener import app, report
    from screener.nodes import validate_node

    if args.command == "flaky":
        check_days(args.days)
        check_count(args.min_transitions, "--min-transitions")
    else:
        check_limit(args.limit)
    node = validate_node(args.node) if args.command == "history" else ""
    policy = load_policy(args.config)
    rows: Sequence[object]
    with app.open_results(policy) as store:
        if args.command == "runs":
            title, rows = "latest runs", store.latest_runs(args.limit)
        elif args.command == "history":
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
