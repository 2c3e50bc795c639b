"""The one function that runs local subprocesses (the Slurm command-line client, the local
transport, the sweep's srun step).

Each child gets its own session, so on timeout the whole tree it spawned (``sh -c 'a & b'``)
is signalled as one process group, and nothing is left running behind the caller.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from screener.errors import CommandTimeout, ConfigError, TransportError


@dataclass(frozen=True)
class CommandResult:
    """One finished command: where it ran, what ran, how it exited and what it printed."""

    host: str
    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str
    duration_s: float


# Seconds between SIGTERM and SIGKILL when a timed-out group is being stopped.
KILL_GRACE_S = 2.0
# Seconds to wait for pipes to close after SIGKILL (a grandchild that left the group
# may still hold them; we stop reading rather than hang).
REAP_WAIT_S = 2.0


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    host: str = "localhost",
    on_start: Callable[[int], None] | None = None,
) -> CommandResult:
    """Run ``argv`` (no shell), wait at most ``timeout`` s, return its exit status and output.

    ``env`` entries are added to (override) the current environment. A non-zero exit is
    returned (a child killed by signal N reports 128+N, as a shell and ssh do); a missing
    executable raises TransportError(kind="failed"); an overrun kills the child's whole
    process group and raises CommandTimeout. ``on_start`` receives the child's pid (= its
    process group id) as soon as it runs, so a caller that gives up can :func:`stop_group`.
    """
    args = tuple(argv)
    if not args:
        raise ConfigError("cannot run an empty command")
    if timeout <= 0:
        raise ConfigError(f"timeout must be > 0 (got {timeout:g})")
    child_env = None if env is None else {**os.environ, **env}
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env,
            text=True,
            errors="replace",
            start_new_session=True,  # own process group: a timeout can kill the whole tree
        )
    except FileNotFoundError:
        raise TransportError(host, "failed", f"{args[0]}: command not found") from None
    except OSError as exc:
        raise TransportError(host, "failed", f"{args[0]}: {exc.strerror or exc}") from None
    if on_start is not None:
        on_start(proc.pid)
    try:
        stdout, stderr = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise CommandTimeout(host, args[0], timeout) from None
    except BaseException:  # KeyboardInterrupt, cancellation: never leave the tree behind
        _kill_group(proc)
        raise
    return CommandResult(
        host=host,
        argv=args,
        exit_status=proc.returncode if proc.returncode >= 0 else 128 - proc.returncode,
        stdout=stdout,
        stderr=stderr,
        duration_s=time.monotonic() - started,
    )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the child's process group, SIGKILL it after a grace period, and reap."""
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=KILL_GRACE_S)
    # Even if the leader exited on SIGTERM, its children may ignore it: KILL the rest.
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=REAP_WAIT_S)
    except subprocess.TimeoutExpired:  # a process that escaped the group holds the pipes
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
    # A member closes its pipes early in its exit, before it is a zombie: EOF alone does not
    # mean the group is gone. Wait (bounded) until no member is still running.
    deadline = time.monotonic() + REAP_WAIT_S
    while _group_running(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.005)


def _group_running(pgid: int) -> bool:
    """True if a process of group ``pgid`` is still running (zombies awaiting a reap are not).

    Reads /proc; where there is none, says False rather than wait for nothing.
    """
    for entry in _proc_entries():
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while we looked, or not ours to read
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _proc_entries() -> list[Path]:
    """The /proc directories of live processes (empty where /proc is not mounted)."""
    try:
        return [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    except OSError:
        return []


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to process group ``pgid``; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def stop_group(pgid: int) -> None:
    """SIGTERM process group ``pgid`` now and SIGKILL it after KILL_GRACE_S, without waiting.

    For a caller that stops waiting on :func:`run_command` (a cancelled screen): the thread
    blocked in ``run_command`` then sees its child exit and reaps it.
    """
    _signal_group(pgid, signal.SIGTERM)
    timer = threading.Timer(KILL_GRACE_S, _signal_group, (pgid, signal.SIGKILL))
    timer.daemon = True
    timer.start()


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart); None
    when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]
