"""The `screener` command: parse, call, print. No decisions are made here.

One module per command family (screen, admin, observe, db); each registers its subcommands
with ``register(sub)`` and sets ``handler`` to a function ``(args, console) -> exit code``.

Exit codes: 0 done and no node SLOW; 3 screen done and at least one node SLOW;
1 error (one line on stderr); 2 bad usage; 130 interrupted (SIGINT); 143 terminated (SIGTERM).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from screener import __version__
from screener.cli import admin, db, hookd, ingest, observe, screen, slurm, spool, trend
from screener.cli.common import EXIT_SLOW
from screener.errors import ScreenerError, Terminated
from screener.hooks.log import describe_error

__all__ = ["EXIT_SLOW", "main"]

FAMILIES = (screen, admin, observe, db, slurm, hookd, spool, ingest, trend)
HOOKS = ("prolog", "epilog")  # run by slurmctld: every failure is exit 0 (docs/slurm.md)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="screener", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"screener {__version__}")
    p.add_argument(
        "--config",
        help="policy TOML (default: $SCREENER_CONFIG, else /etc/screener/screener.toml)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for family in FAMILIES:
        family.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `screener` console script."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # argparse stops filling a positional list once an option came between
        if getattr(args, "intermixed", None) and not any(e.startswith("-") for e in extra):
            getattr(args, args.intermixed).extend(Path(e) for e in extra)
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if threading.current_thread() is threading.main_thread():
        # Slurm's PrologEpilogTimeout sends SIGTERM: stop like on Ctrl-C (run marked failed,
        # probes stopped on the nodes), say so in one line, exit 143.
        signal.signal(signal.SIGTERM, _terminate)
    # Piped output (logs, `| less`) gets a wide table instead of rich's 80-column default,
    # unless COLUMNS says how wide the reader is.
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    console = Console(width=None if wide else 200)
    try:
        return int(args.handler(args, console))
    except ScreenerError as exc:
        print(f"screener: error: {exc}", file=sys.stderr)
        return 0 if args.command in HOOKS else 1
    except KeyboardInterrupt:
        print("screener: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"screener: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except Exception as exc:  # a bug, RecursionError, MemoryError: still one line
        print(f"screener: error: internal error: {describe_error(exc)}", file=sys.stderr)
        # A slurmctld hook fails open: a non-zero exit would requeue (or mark) every job.
        return 0 if args.command in HOOKS else 1


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)
