"""LocalTransport: run probes on the machine we are on (``--transport local``, prologs, tests)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

from screener.errors import TransportError
from screener.process import run_command, stop_group
from screener.transport.base import RUN_TAG, TAG_ENV, CommandResult


def local_names() -> frozenset[str]:
    """Names that mean this machine: localhost, its hostname and its short hostname."""
    name = socket.gethostname()
    return frozenset({"localhost", name, name.split(".", 1)[0]})


class LocalTransport:
    """Runs argv through ``run_command`` in a worker thread; only for this host's own names."""

    def __init__(self) -> None:
        self._names = local_names()

    async def run(self, host: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run ``argv`` here; refuse any host that is not this machine."""
        if host not in self._names:
            known = ", ".join(sorted(self._names))
            raise TransportError(
                host, "unreachable", f"local transport only runs on this host ({known})"
            )
        tag = RUN_TAG.get()
        pids: list[int] = []
        try:
            return await asyncio.to_thread(
                run_command,
                argv,
                timeout=timeout,
                host=host,
                # Same tag as remote commands: a run killed with SIGKILL is cleaned up alike.
                env={TAG_ENV: tag} if tag else None,
                on_start=pids.append,
            )
        except asyncio.CancelledError:  # SIGINT/SIGTERM: stop fio now, do not wait for it
            for pid in pids:
                stop_group(pid)
            raise

    async def close(self) -> None:
        """Nothing to release: every command is its own subprocess."""
