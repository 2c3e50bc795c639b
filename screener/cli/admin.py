"""Admin queries over the store: `nodes`, `history NODE`, `flaky`, `runs`, `show RUN`.

Each prints a rich table, or with ``--json`` / ``--csv`` the same rows for scripts.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from rich.console import Console

from screener.cli.common import Subparsers, check_count, check_id, check_limit, parse_duration
from screener.policy import Policy, load_policy
from screener.probe_data import Status

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported only when a command runs
    from screener.store.query_rows import EventRow, NodeRow, RunDetail


def parse_since(text: str, option: str = "--since") -> timedelta:
    """'30d', '12h', '2w', '90m' -> a positive timedelta; ConfigError otherwise."""
    return parse_duration(text, option)


def _output_flags(p: argparse.ArgumentParser) -> None:
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the rows as JSON")
    fmt.add_argument("--csv", action="store_true", help="print the rows as CSV")


def register(sub: Subparsers) -> None:
    n = sub.add_parser("nodes", help="every node: latest verdict, figures, probe age, drains")
    n.add_argument(
        "--all", action="store_true", help="table of every node, not only those needing a look"
    )
    n.add_argument("--stale", default="2d", help="a probe older than this needs a look (2d)")
    n.add_argument(
        "--slurm",
        action="store_true",
        help="Slurm's whole view beside screener's: every node with its state and reason, "
        "'never probed' and 'drained by someone else' where true",
    )
    n.add_argument("--partition", default="", help="with --slurm: only this partition's nodes")
    _output_flags(n)
    n.set_defaults(handler=run)

    h = sub.add_parser("history", help="one node's verdicts, newest first")
    h.add_argument("node")
    h.add_argument("--since", default="30d", help="window, e.g. 30d, 12h (default 30d)")
    _output_flags(h)
    h.set_defaults(handler=run)

    f = sub.add_parser("flaky", help="nodes with repeated slow episodes, worst first")
    f.add_argument("--since", default="30d", help="window, e.g. 30d, 2w (default 30d)")
    f.add_argument("--min-episodes", type=int, default=2, help="at least this many (default 2)")
    _output_flags(f)
    f.set_defaults(handler=run)

    r = sub.add_parser("runs", help="latest runs with their verdict counts")
    r.add_argument("--limit", type=int, default=20)
    _output_flags(r)
    r.set_defaults(handler=run)

    s = sub.add_parser("show", help="one run: nodes, figures, signals, reasons, drains")
    s.add_argument("run_id", metavar="RUN", type=int)
    _output_flags(s)
    s.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.hostlist import validate_node
    from screener.store import views

    # Every argument is checked before the database is opened: bad input costs nothing.
    node = validate_node(args.node) if args.command == "history" else ""
    since = parse_since(args.since) if args.command in ("history", "flaky") else None
    stale = parse_since(args.stale, "--stale").total_seconds() if args.command == "nodes" else 0.0
    if args.command == "flaky":
        check_count(args.min_episodes, "--min-episodes")
    if args.command == "runs":
        check_limit(args.limit)
    if args.command == "show":
        check_id(args.run_id, "RUN")  # an id beyond 2^63 overflows SQLite's integer
    policy = load_policy(args.config)
    now = datetime.now(UTC)
    rows: Sequence[object]
    header: list[str] = []
    footer: list[str] = []
    with app.open_results(policy) as store:
        if args.command == "nodes":
            nodes = views.node_overview(store, now, policy)  # with the sweeps' DECLINING marks
            if args.slurm:
                nodes = _with_slurm(nodes, policy, args.partition)
            header = [nodes_summary(nodes, stale)] if nodes else []
            title, empty = "nodes", NO_NODES
            if not (args.all or args.json or args.csv):
                every = len(nodes)
                nodes = [r for r in nodes if needs_a_look(r, stale)]
                title = "nodes needing a look (not OK, drained, stale, declining; --all: all)"
                if every:
                    empty = (
                        f"no node needs a look: all {every} OK, none drained by screener, none "
                        f"declining, none probed more than {args.stale} ago (--all lists them)"
                    )
            rows, footer = nodes, declining_lines(nodes)
        elif args.command == "history":
            assert since is not None
            title = f"history of {node}, last {args.since}"
            rows = views.node_history(store, node, now - since)
            empty = f"no verdict for {node} in the last {args.since}"
            footer = event_lines(node, store.node_events(node, EVENTS_SHOWN), now - since)
        elif args.command == "flaky":
            assert since is not None
            title = f"flaky nodes, last {args.since}, >= {args.min_episodes} episodes"
            rows = views.flaky(store, now - since, args.min_episodes)
            empty = f"no flaky node in the last {args.since} (>= {args.min_episodes} slow episodes)"
        elif args.command == "runs":
            title, rows = "latest runs", store.latest_runs(args.limit)
            empty = "no run in the store yet: `screener screen NODESET` or the sweep adds them"
        else:
            detail = views.run_detail(store, args.run_id)
            title, rows = f"run {args.run_id}", detail.nodes
            header = _run_header(detail)
            empty = f"run {args.run_id} has no verdict (status {detail.run.status})"
    view = HUMAN_COLUMNS["nodes --slurm" if getattr(args, "slurm", False) else args.command]
    _emit(args, console, title, rows, header, empty, view, footer)
    return 0


EVENTS_SHOWN = 20  # `history NODE`: the latest events of the window, below the verdicts


def event_lines(node: str, events: Sequence[EventRow], since: datetime) -> list[str]:
    """What screener did to ``node`` within the window, newest first (drains, resumes,
    fast-path admissions with their sentinel figure, guard trips), one line each."""
    shown = [e for e in events if (e.at if e.at.tzinfo else e.at.replace(tzinfo=UTC)) >= since]
    if not shown:
        return []
    lines = [f"what screener did to {node} (newest first, at most {EVENTS_SHOWN}):"]
    for e in shown:
        run = f" r{e.run_id}" if e.run_id is not None else ""
        lines.append(f"  {e.at:%Y-%m-%d %H:%M}  {e.action}{run}: {e.reason}")
    return lines


# What each command's human table shows, so that it reads at 80 columns: figures, one line
# per row. The whole reason of every row that is not OK follows the table
# (terminal.full_reasons); --json/--csv carry every field.
HUMAN_COLUMNS: dict[str, tuple[str, ...]] = {
    "nodes": (
        *("node", "status", "read_mb_s", "write_mb_s", "ratio", "age_s", "drained_by_screener"),
        "slow_in",  # a DECLINING node's forecast ("~9d"); its words follow the table
    ),
    # a declining node's forecast: in the words below the table (the note needs the room)
    "nodes --slurm": ("node", "slurm_state", "status", "age_s", "slurm_reason", "note"),
    "history": ("run_id", "started_at", "trigger", "status", "read_mb_s", "write_mb_s", "ratio"),
    "flaky": ("node", "episodes", "open", "last_seen", "ttr_median_s", "resumes"),
    "runs": ("id", "trigger", "job_id", "started_at", "status", "n_ok", "n_slow", "nodeset"),
    "show": ("node", "status", "read_mb_s", "write_mb_s", "ratio", "confirmed", "actions"),
}


def _with_slurm(rows: Sequence[NodeRow], policy: Policy, partition: str) -> list[NodeRow]:
    """`nodes --slurm`: ask Slurm for every node and join (report/slurm_view.py)."""
    from screener.report.slurm_view import with_slurm
    from screener.slurm.choose import select_client

    client, _ = select_client(policy.slurm)
    return with_slurm(rows, client.nodes(), policy.slurm.tag, partition)


NO_NODES = "no node in the store yet: `screener screen NODESET` or the sweep adds them"


def needs_a_look(row: NodeRow, stale_s: float) -> bool:
    """Not OK, drained by screener, not probed for ``stale_s`` seconds, or DECLINING (an OK
    node forecast to cross the slow line: the admin schedules its swap)."""
    return (
        row.status is not Status.OK
        or row.drained_by_screener
        or row.age_s is None
        or row.age_s > stale_s
        or row.declining is not None
    )


def nodes_summary(rows: Sequence[NodeRow], stale_s: float) -> str:
    """'10000 nodes: 9950 OK, 30 SLOW_READ, 20 UNKNOWN; 12 drained by screener; 3 stale',
    then '; 2 declining' when a node is (early warning, `screener trend`)."""
    counts = Counter("never judged" if r.status is None else r.status.value for r in rows)
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    drained = sum(r.drained_by_screener for r in rows)
    stale = sum(1 for r in rows if r.age_s is not None and r.age_s > stale_s)
    declining = sum(r.declining is not None for r in rows)
    tail = f"; {declining} declining" if declining else ""
    return f"{len(rows)} nodes: {parts}; {drained} drained by screener; {stale} stale{tail}"


def declining_lines(rows: Sequence[NodeRow]) -> list[str]:
    """Below the `nodes` table, each DECLINING node's trend words as its last sweep stored
    them, one line each: 'node07 declining: seq read 0.78x peers, -0.03x/sweep, slow
    ~2026-12-08' (`screener trend node07` fits it now and says it in full)."""
    return [f"{r.node} declining: {r.declining}" for r in rows if r.declining is not None]


def _run_header(d: RunDetail) -> list[str]:
    """The lines above `show RUN`'s table: trigger, job, times, fleet flags."""
    r = d.run
    lines = [
        f"run {r.id}: {r.trigger.value} job={r.job_id or '-'} nodes={r.nodeset} "
        f"status={r.status} started={r.started_at:%Y-%m-%d %H:%M:%S}Z",
        f"round-1 peer read median: {d.peer_read_median_mb_s or 0:,.0f} MB/s; "
        f"{r.n_ok} OK, {r.n_slow} SLOW, {r.n_degraded} DEGRADED, {r.n_unknown} UNKNOWN",
    ]
    if d.mode:
        label = "probe" if r.trigger.value == "prolog" else "sweep mode"
        lines.append(f"{label}: {d.mode}")
    if r.shared_cause:
        lines.append(f"shared cause: {r.shared_cause_reason}")
    if d.guard_reason:
        lines.append(f"guard or shared cause: {d.guard_reason}")
    return lines


def _emit(
    args: argparse.Namespace,
    console: Console,
    title: str,
    rows: Sequence[object],
    header: Sequence[str],
    empty: str,
    columns: Sequence[str] | None = None,
    footer: Sequence[str] = (),
) -> None:
    """The rows as JSON, CSV or a table; an empty answer in words, with its criteria."""
    from screener.report import terminal

    if args.json:
        print(terminal.rows_json(rows))
    elif args.csv:
        print(terminal.rows_csv(rows), end="")
    else:
        for line in header:
            console.print(line, highlight=False, markup=False)
        if rows:
            console.print(terminal.rows_table(title, rows, columns))
            for line in terminal.full_reasons(rows):
                console.print(line, highlight=False, markup=False)
        else:
            console.print(empty, highlight=False, markup=False)
        for line in footer:
            console.print(line, highlight=False, markup=False)
