"""Stop what a run left on its nodes: every process whose environment carries its run tag.

A screen killed by SIGTERM (Slurm's PrologEpilogTimeout), SIGINT or SIGKILL leaves fio and
iostat running on the nodes: closing an SSH channel without a pty sends them no signal. Each
remote command carries ``SCREENER_RUN=<tag>`` (transport.base.remote_command), so a small
script on the node finds exactly those processes in /proc/*/environ and kills them by pid.
Never by name: a user's own fio on the node is left alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from screener.errors import ConfigError, ScreenerError
from screener.transport.base import RUN_TAG, TAG_ENV, TAG_RE, Transport

assert TAG_ENV == "SCREENER_RUN"  # the script below spells it out

CLEANUP_TIMEOUT_S = 10.0  # per node; a prolog killed by Slurm has little time left

# $1 = the tag. One grep reads every /proc/PID/environ (-z: NUL-separated entries, -x: the
# whole entry, -F: no pattern syntax), so a node with thousands of processes is scanned in
# one process, not two forks per pid. This command itself never carries the tag (RUN_TAG is
# unset for cleanup). TERM, then a second scan before the KILL: a process forked after the
# first scan (fio starts its job process after its main one) is found and killed too (CI,
# 2026-11-26: one fio left running after a SIGTERM'd screen). Prints the pids it signalled.
CLEANUP_SCRIPT = r"""
scan() {
  found=""
  for f in $(grep -lxzF -e "SCREENER_RUN=$1" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "$pid" = "$$" ] || found="$found $pid"
  done
}
scan "$1"
[ -n "$found" ] || exit 0
first="$found"
kill -TERM $first 2>/dev/null
sleep 1
scan "$1"
kill -KILL $first $found 2>/dev/null
echo "killed$first${found:+; after TERM:$found}"
"""


def cleanup_argv(tag: str) -> list[str]:
    """The node-side command killing every process tagged ``tag`` (TERM, then KILL)."""
    if not TAG_RE.fullmatch(tag):
        raise ConfigError(f"invalid run tag {tag!r}")
    # The tag is a positional parameter ("$1"), never part of the script text.
    return ["sh", "-c", CLEANUP_SCRIPT, "screener-cleanup", tag]


async def kill_tagged(
    transport: Transport, nodes: Sequence[str], tag: str, timeout: float = CLEANUP_TIMEOUT_S
) -> dict[str, str]:
    """Run the cleanup on every node at once; {node: what it did or why it could not}."""
    token = RUN_TAG.set(None)  # the cleanup itself must not carry the tag it hunts
    try:

        async def one(node: str) -> tuple[str, str]:
            try:
                res = await transport.run(node, cleanup_argv(tag), timeout=timeout)
            except ScreenerError as exc:
                return node, f"cleanup failed: {exc}"
            return node, res.stdout.strip() or "nothing left"

        return dict(await asyncio.gather(*(one(n) for n in nodes)))
    finally:
        RUN_TAG.reset(token)
