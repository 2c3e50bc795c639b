"""LocalTransport: run probes on the machine we are on (``--transport local``, prologs, tests)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence

from screener.errors import TransportError
from screener.runner import run_command
from screener.transport.base import CommandResult


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
        return await asyncio.to_thread(run_command, argv, timeout=timeout, host=host)

    async def close(self) -> None:
        """Nothing to release: every command is its own subprocess."""
