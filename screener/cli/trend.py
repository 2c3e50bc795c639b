"""`screener trend [NODESET]`: early warning (issue 46), each node's sweep figures fitted over
its recent sweeps (seq read, rand read, read p99, stall share, and the drive's SMART
percentage used and media errors where it has them); DECLINING nodes first, with the
figure, the slope and the forecast in words. A warning for the admin who schedules the
swap: nothing is drained. Nodes named in NODESET without SMART facts are said to be so.

It fits on demand; `screener nodes` and the exporter read the marks each sweep stores
(store/trend_marks.py). ``--refresh`` stores this fit as those marks too (under [trend]
horizon_days: with ``--horizon``, the table is of that horizon, the marks are not)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from rich.console import Console

from screener.cli.common import Subparsers, parse_duration

# The table at 80 columns: figures and the forecast's day; a DECLINING row's words (the
# sweeps left too) follow it; --json/--csv carry every field (a TOO_FEW row's reason too).
COLUMNS = ("node", "figure", "status", "level", "per_sweep", "crosses_at")


def register(sub: Subparsers) -> None:
    t = sub.add_parser("trend", help="early warning: nodes whose figures fall toward the slow line")
    t.add_argument("nodeset", nargs="?", default="", help="e.g. 'node[01-64]' (default: all)")
    t.add_argument("--horizon", help="warn of a crossing within this (default [trend] 14d)")
    t.add_argument("--all", action="store_true", help="every node's figures, not only warnings")
    t.add_argument(
        "--refresh",
        action="store_true",
        help="also store the fit as the marks `nodes` and the exporter read (else: each sweep)",
    )
    fmt = t.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print every row as JSON")
    fmt.add_argument("--csv", action="store_true", help="print every row as CSV")
    t.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.hostlist import expand_nodeset, fold_nodes
    from screener.policy import load_policy
    from screener.report import terminal
    from screener.store.trend import SMART_FIGURES, node_trends
    from screener.store.trend_marks import refresh_marks
    from screener.verdict.trend import TrendStatus

    # every argument checked before the database is opened
    nodes = expand_nodeset(args.nodeset) if args.nodeset else None
    horizon = parse_duration(args.horizon, "--horizon") if args.horizon else None
    policy = load_policy(args.config)
    now = datetime.now(UTC)
    if args.refresh:  # a writable store: the marks of these nodes (all: every node) replaced
        with app.open_for_actions(policy) as store:
            rows = refresh_marks(store, policy, now, nodes)
            if horizon is not None:
                rows = node_trends(store, policy, now, nodes, horizon)
    else:
        with app.open_results(policy) as store:
            rows = node_trends(store, policy, now, nodes, horizon)
    if args.json:
        print(terminal.rows_json(rows))
        return 0
    if args.csv:
        print(terminal.rows_csv(rows), end="")
        return 0
    warned = [r for r in rows if r.status is TrendStatus.DECLINING]
    reach = args.horizon or f"{policy.trend.horizon_days:g}d"
    fitted = len({r.node for r in rows})
    stored = (
        f"; stored as the marks `screener nodes` reads (within {policy.trend.horizon_days:g}d)"
        if args.refresh
        else ""
    )
    console.print(
        f"{fitted} nodes with sweeps: {len({r.node for r in warned})} declining "
        f"(crossing the slow line within {reach}); a warning, nobody is drained{stored}",
        highlight=False,
        markup=False,
    )
    shown = rows if args.all else warned
    if shown:
        title = "trends" if args.all else f"declining nodes (within {reach}; --all: every node)"
        console.print(terminal.rows_table(title, shown, COLUMNS))
    for r in warned:
        console.print(r.reason, highlight=False, markup=False, soft_wrap=True)  # one line
    if nodes is not None:  # asked of these nodes: say which have no SMART series at all
        with_smart = {r.node for r in rows if r.figure in SMART_FIGURES}
        bare = sorted({r.node for r in rows} - with_smart)
        if bare:
            console.print(
                f"{fold_nodes(bare)}: no SMART facts in {'their' if len(bare) > 1 else 'its'} "
                f"sweeps: {' and '.join(SMART_FIGURES)} left out",
                highlight=False,
                markup=False,
            )
    if not rows:
        console.print(
            "no sweep figures in the store yet: `screener sweep` adds them",
            highlight=False,
            markup=False,
        )
    return 0
