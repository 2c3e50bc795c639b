"""The hook side of `screener hookd`: hand `screener prolog|epilog` to the resident worker
and wait for its exit code, or return None so the hook runs in this process as before.

Imports only the standard library: it runs before (and instead of) the ~1 s of imports it
exists to save. A worker that never accepted the request is a fallback (nothing ran); one
that accepted it and then vanished is the hook's documented failure: one line, exit 0.
A socket served by any uid but the hook's own or root's gets nothing, not one byte: the
request carries the hook's whole environment (the database URL) and its stdio, and the
reply is obeyed (exit 1 requeues the job).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import sys
from types import FrameType
from typing import IO

from screener.hook_server.wire import (
    ACCEPTED,
    DEFAULT_SOCKET,
    ENV_SOCKET,
    EXIT,
    FALLBACK_ENV,
    GO,
    REFUSED,
    SIGNAL,
    encode_request,
    package_dir,
    read_line,
)

# Seconds to connect and to hear "accepted": the worker forks and checks in ~10 ms; a
# server too busy to answer in this time costs the hook its in-process run, not its budget.
ACCEPT_TIMEOUT_S = 3.0


def socket_path() -> str | None:
    """The socket to try: $SCREENER_HOOKD_SOCKET ("off" or empty: none), else the default
    path when it exists (a site without hookd pays one stat, no message)."""
    value = os.environ.get(ENV_SOCKET)
    if value is not None:
        return None if value in ("", "off") else value
    path = DEFAULT_SOCKET
    return path if os.path.exists(path) else None


def via_hookd(args: list[str]) -> int | None:
    """The hook's exit code as the worker ran it, or None to run it here. A fallback with
    an explicit or existing socket sets $SCREENER_HOOKD_FALLBACK (the hook logs it)."""
    path = socket_path()
    if path is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ACCEPT_TIMEOUT_S)
        sock.connect(path)
        untrusted = _untrusted(sock, path)  # before one byte of the environment leaves
        if untrusted:
            sock.close()
            _fallback(untrusted)
            return None
        request = encode_request(args, dict(os.environ), os.getcwd(), package_dir())
        unsent = _send(sock, request)
        stream = sock.makefile("rb")
        word, rest = read_line(stream)
        if not word and unsent is not None:
            raise unsent  # no reply either: the send's error says why
        if word == ACCEPTED:  # committed: the worker runs the hook only once it reads this
            sock.sendall(f"{GO}\n".encode())
    except OSError as exc:
        sock.close()
        _fallback(f"{path}: {exc}")
        return None
    if word != ACCEPTED:
        sock.close()
        _fallback(rest if word == REFUSED else f"{path}: unexpected reply {word!r}")
        return None
    return _wait(sock, stream, args[0])


def _send(sock: socket.socket, request: bytes) -> OSError | None:
    """Send the request, with stdin, stdout and stderr (the worker writes where this process
    would have); the error when the server closed first (None: sent). A server that refuses
    this uid says so and closes before it reads the request: the send then breaks (EPIPE),
    but its reply is still there to read, and says why (seen in CI: "Broken pipe" instead of
    the refusal)."""
    try:
        socket.send_fds(sock, [request[:4096]], [0, 1, 2])
        sock.sendall(request[4096:])
    except (BrokenPipeError, ConnectionResetError) as exc:
        return exc
    return None


def _untrusted(sock: socket.socket, path: str) -> str:
    """Why the server behind ``path`` may not have this hook ("" = it may): it must run as
    this hook's uid (SlurmUser, as slurmctld runs its hooks) or root, whoever made the path."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("i2I"))
    _pid, uid, _gid = struct.unpack("i2I", creds)  # struct ucred
    own = os.geteuid()
    if uid in (own, 0):
        return ""
    return f"{path}: served by uid {uid}, not this hook's uid ({own}) or root: not trusted"


def _wait(sock: socket.socket, stream: IO[bytes], hook: str) -> int:
    """Forward SIGTERM/SIGINT (Slurm's PrologEpilogTimeout) to the worker; its exit code."""
    sock.settimeout(None)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # the worker is gone: its EOF says the rest
            sock.sendall(f"{SIGNAL} {signum}\n".encode())

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    try:
        word, rest = read_line(stream)
        if word == EXIT:
            return int(rest)
        why = "it closed the connection" if not word else f"it said {word!r}"
    except (OSError, ValueError) as exc:
        why = str(exc)
    finally:
        sock.close()
    outcome = "fail open: the job runs, nobody drained" if hook == "prolog" else "exit 0"
    print(
        f"screener {hook}: the hookd worker ended without an exit code ({why}); {outcome}",
        file=sys.stderr,
    )
    return 0


def _fallback(why: str) -> None:
    """Run the hook here; say why in its log (the socket was there, so it was meant)."""
    os.environ[FALLBACK_ENV] = why
