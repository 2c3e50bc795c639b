"""`screener hookd`: the resident worker that runs slurmctld's hooks pre-imported."""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from screener.cli.common import Subparsers
from screener.errors import ConfigError
from screener.hook_server.wire import DEFAULT_SOCKET, ENV_SOCKET


def register(sub: Subparsers) -> None:
    h = sub.add_parser(
        "hookd",
        help="serve `screener prolog|epilog` with screener already imported (systemd unit)",
    )
    h.add_argument(
        "--socket",
        help=f"unix socket (default: ${ENV_SOCKET}, else {DEFAULT_SOCKET}); mode 0600, "
        "only this user and root may use it",
    )
    h.set_defaults(handler=run)


def run(args: argparse.Namespace, console: Console) -> int:
    from screener.cli import main
    from screener.hook_server.server import serve
    from screener.hooks import later

    def hook(argv: list[str]) -> int:
        later.hold()  # the worker sends the exit code before the deferred work
        return main(argv)

    path = args.socket or os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET
    if path == "off":
        raise ConfigError(f"{ENV_SOCKET}=off: no socket to serve on (pass --socket PATH)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise ConfigError(f"{os.path.dirname(path)}: no such directory for the hookd socket")
    try:
        return serve(path, hook, after=later.run_pending)
    except OSError as exc:
        raise ConfigError(f"cannot serve on {path}: {exc}") from exc
