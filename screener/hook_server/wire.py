"""What the hook and the worker say to each other over the unix socket (standard library
only: the hook side imports this before anything else).

hook -> worker: one JSON line {"argv", "env", "cwd", "package"}, with the hook's stdin,
stdout and stderr passed as SCM_RIGHTS; later ``S <signum>`` lines (a signal it got).
worker -> hook: ``A`` (accepted) or ``R <why>`` (refused: run it yourself); after ``A``
the hook answers ``G`` and is committed to wait (a hook that timed out before ``A`` closes
instead, and the worker runs nothing: never twice); then ``E <exit code>`` when done.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

import screener

ENV_SOCKET = "SCREENER_HOOKD_SOCKET"
# Set for the in-process run when a socket was there but not used: the hook logs why.
FALLBACK_ENV = "SCREENER_HOOKD_FALLBACK"
DEFAULT_SOCKET = "/run/screener/hookd.sock"
HOOKS = ("prolog", "epilog")  # what hookd runs (as screener.cli.HOOKS)
ACCEPTED, REFUSED, GO, EXIT, SIGNAL = "A", "R", "G", "E", "S"
# A request is argv and an environment: a megabyte is far past any real one.
MAX_REQUEST = 1 << 20


def package_dir() -> str:
    """The screener package this process runs: hook and worker must run the same one."""
    return os.path.dirname(os.path.abspath(screener.__file__))


def encode_request(argv: list[str], env: dict[str, str], cwd: str, package: str) -> bytes:
    """One JSON line (json.dumps escapes newlines inside values)."""
    body = {"argv": argv, "env": env, "cwd": cwd, "package": package}
    return json.dumps(body).encode() + b"\n"


def decode_request(line: bytes) -> dict[str, Any]:
    """The request, checked for shape; ValueError with one line if it is not one."""
    body = json.loads(line)
    ok = (
        isinstance(body, dict)
        and isinstance(body.get("argv"), list)
        and all(isinstance(a, str) for a in body["argv"])
        and isinstance(body.get("env"), dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in body["env"].items())
        and isinstance(body.get("cwd"), str)
        and isinstance(body.get("package"), str)
    )
    if not ok:
        raise ValueError("malformed hookd request")
    return dict(body)


def read_line(stream: IO[bytes]) -> tuple[str, str]:
    """(word, rest) of the next line; ("", "") at end of stream."""
    raw = stream.readline(4096)
    if not raw:
        return "", ""
    word, _, rest = raw.decode(errors="replace").rstrip("\n").partition(" ")
    return word, rest
