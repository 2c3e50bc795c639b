"""What every transport promises: run an argv on a host, get a CommandResult or a TransportError.

Also the one place where a remote argv becomes a command string (``remote_command``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from screener.errors import ConfigError, TransportError
from screener.process import CommandResult

__all__ = [
    "CommandResult",
    "Prepares",
    "Transport",
    "check",
    "remote_command",
]  # CommandResult lives in screener.process


# Seconds the node-side ``timeout`` waits after SIGTERM before it sends SIGKILL.
REMOTE_KILL_AFTER_S = 5.0
# Exit statuses of coreutils ``timeout`` when it had to stop the command (TERM, then KILL).
TIMEOUT_EXIT_STATUSES = (124, 128 + 9)
# Extra seconds the client waits past the command timeout for the node-side ``timeout``
# to report (exit 124) before giving up on the channel itself.
CLIENT_GRACE_S = 2.0
# The run tag every remote command of a screen carries in its environment (SCREENER_RUN=tag),
# so that what a killed run left on a node can be found and stopped by pid, never by name.
RUN_TAG: ContextVar[str | None] = ContextVar("screener_run_tag", default=None)
TAG_ENV = "SCREENER_RUN"
TAG_RE = re.compile(r"[A-Za-z0-9-]{1,64}")


class Transport(Protocol):
    """Runs argv lists on named hosts. A non-zero exit is a result, not an error."""

    async def run(self, host: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run ``argv`` on ``host``; raise TransportError when no result could be had."""
        ...

    async def close(self) -> None:
        """Release every connection/thread the transport holds."""
        ...


@runtime_checkable
class Prepares(Protocol):
    """A transport that can open its connections ahead of the first command (asyncssh)."""

    def prepare(self, hosts: Sequence[str]) -> None:
        """Start connecting to ``hosts`` without waiting (in a running event loop); a run on
        one of them then finds its connect under way or done. Never raises: a connect that
        fails is the first run's error on that host."""
        ...


def check(result: CommandResult) -> CommandResult:
    """Return ``result`` if it exited 0, else raise TransportError(kind="failed")."""
    if result.exit_status == 0:
        return result
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    why = lines[0] if lines else "no stderr"
    argv0 = result.argv[0] if result.argv else "?"
    raise TransportError(
        result.host, "failed", f"{argv0} exited with status {result.exit_status}: {why}"
    )


def remote_command(argv: Sequence[str], timeout: float) -> str:
    """The command string sent to sshd for ``argv``, wrapped in coreutils ``timeout``.

    sshd always hands the command string to the remote user's login shell (``$SHELL -c``);
    there is no argv-level exec in the SSH protocol. ``shlex.join`` single-quotes every
    argument that is not made only of shell-safe characters (and escapes embedded single
    quotes as ``'"'"'``), so a POSIX shell splits the string back into exactly these
    words and performs no expansion, substitution or command separation on any of them.
    """
    if not argv:
        raise ConfigError("cannot run an empty command")
    tag = RUN_TAG.get()
    if tag is not None and not TAG_RE.fullmatch(tag):
        raise ConfigError(f"invalid run tag {tag!r}")
    # env puts the run tag in the environment of timeout and everything under it (fio,
    # iostat, their shells): screener.transport.cleanup finds those processes by it.
    tagged = ["env", f"{TAG_ENV}={tag}"] if tag else []
    wrapped = [
        *tagged,
        "timeout",
        # Dropping the channel does not stop a remote process (no pty => no SIGHUP), so an
        # overrunning fio would keep hammering the node after the client gave up. timeout
        # runs the command in its own process group and signals the whole group on expiry.
        "-k",  # if SIGTERM is ignored (fio in uninterruptible I/O), SIGKILL this much later
        f"{REMOTE_KILL_AFTER_S:g}",
        f"{timeout:g}",  # the command's own deadline, measured on the node
        *argv,  # timeout stops option parsing at DURATION, so argv[0] may even start with '-'
    ]
    return shlex.join(wrapped)


def is_remote_timeout(exit_status: int, duration_s: float, timeout: float) -> bool:
    """True when the node-side ``timeout`` wrapper, not the command, ended the run."""
    return exit_status in TIMEOUT_EXIT_STATUSES and duration_s >= timeout * 0.98
