"""`screener screen`: probe nodes, judge them, print the table (or JSON)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from screener.cli.common import EXIT_SLOW, Subparsers, check_deadline, job_id_arg
from screener.errors import ScreenerError, StoreError
from screener.policy import load_policy
from screener.probe_data import Trigger
from screener.spool import SPOOLED_NOTE


def register(sub: Subparsers) -> None:
    s = sub.add_parser("screen", help="probe nodes and judge them against their peers")
    s.add_argument("nodeset", nargs="?", help="ClusterShell NodeSet, e.g. 'node[01-08]'")
    s.add_argument("--local", action="store_true", help="screen this machine (no SSH)")
    s.add_argument("--target", help="directory on the local NVMe filesystem to probe")
    s.add_argument("--transport", choices=["asyncssh", "fabric", "local"])
    s.add_argument("--no-confirm", action="store_true", help="do not re-probe suspects")
    s.add_argument("--no-store", action="store_true", help="do not write the run to the DB")
    s.add_argument("--job-id", help="Slurm job id this screen belongs to")
    s.add_argument("--trigger", choices=[t.value for t in Trigger], default="manual")
    s.add_argument(
        "--deadline",
        type=float,
        metavar="S",
        help="decide after S seconds with what is done (unfinished nodes UNKNOWN, never SLOW)",
    )
    s.add_argument("--json", action="store_true", help="print JSON only")
    s.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener import app
    from screener.report import terminal

    check_deadline(args.deadline)  # inf would overflow the event loop's timer
    if args.job_id is not None:
        job_id_arg(args.job_id, "--job-id")  # what `screener job` would refuse later
    policy = app.screen_policy(
        load_policy(args.config),
        local=args.local,
        target=args.target,
        transport=args.transport,
        confirm=not args.no_confirm,
    )
    nodes = app.resolve_nodes(args.nodeset, args.local)
    with terminal.progress(console, len(nodes), enabled=not args.json) as on_done:
        request = app.ScreenRequest(
            tuple(nodes),
            policy,
            trigger=Trigger(args.trigger),
            job_id=args.job_id,
            store_results=not args.no_store,
            on_done=on_done,
            deadline_s=args.deadline,
        )
        result = app.run_screen(request)
    for note in result.notes:  # planted names moved aside (screener.probe.private)
        print(f"screener: warning: {note}", file=sys.stderr)
    if args.json:
        print(terminal.result_json(result))
    else:
        terminal.print_result(result, console)
    if result.store_error and SPOOLED_NOTE in result.store_error:
        # Nothing lost: the next run (or `screener spool replay`) stores them.
        print(f"screener: warning: {result.store_error}", file=sys.stderr)
    elif result.store_error:  # the figures are printed above; say they were not all stored
        raise StoreError(f"results above not stored: {result.store_error}")
    if args.local and (failure := terminal.local_failure(result)):
        raise ScreenerError(failure)  # screening this machine failed: say why, exit 1
    return EXIT_SLOW if terminal.any_slow(result) else 0
