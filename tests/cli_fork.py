"""`python -m screener.cli ARGV` for tests, forked from a resident server with the imports
done: ~0.8 s of CPU per call was imports (screener.cli, SQLAlchemy, the ORM, rich).

    from tests import cli_fork
    res = cli_fork.run(["nodes", "--json"], env=env, timeout=60)  # argv AFTER `-m screener.cli`

``run`` has subprocess.run's semantics for the parameters it takes (stdin is /dev/null
unless ``input`` is given, as in the helpers it replaces); ``res.args`` is the full
``[sys.executable, "-m", "screener.cli", *argv]``. ``SCREENER_TEST_CLI_FORK=0`` makes every
call a real process (to compare, or to rule this module out when a test fails).

One server per pytest process, started on first use: ``python -m tests.cli_fork SOCKET``,
socket in a private ``tempfile.mkdtemp()`` directory (0700). It imports PRELOAD once, then
forks one child per call; the child becomes what a fresh ``python -m screener.cli ARGV``
would be: the call's argv, whole environment, cwd, umask, stdin/stdout/stderr, ignored and
blocked signals, Python's default SIGINT/SIGTERM handlers, ``sys.path[0]`` = cwd; it runs
``screener/cli/__main__.py`` (``sys.exit(main())``) with runpy and ends like an interpreter
does (SystemExit handling, threads joined, atexit, stdio flushed, modules finalised), so
the exit status is the real one. Same pattern as the product's `screener hookd`
(screener/hook_server/), which is not used here: it runs only the Slurm hooks.

Protocol, one unix-socket connection per call:
  client -> server  one JSON line {argv, env, cwd, umask, sigign, sigblk}, stdin/stdout/
                    stderr attached as SCM_RIGHTS; later "K" (kill it: timeout) or a close
                    (the caller is gone: kill it too)
  server -> client  "P <pid>" once forked, or "R <why>" (refused: the client runs a real
                    process instead); then "E <returncode>" once the server reaped it
                    (negative: killed by that signal, as subprocess reports it)

What a fork cannot make fresh, and how it is handled:
- Anything read from the environment while PRELOAD is imported (prometheus_client's
  PROMETHEUS_*, psycopg's PSYCOPG_IMPL, ClusterShell's HOME/XDG_CONFIG_HOME, ...) is
  recorded as it is read, with PYTHON*, LC_*, LANG, TZ and OPENSSL_* (read by the
  interpreter or C libraries at startup): a call whose environment differs in one of them
  is refused and runs as a real process. Two import-time copies are redone in the child
  from the call's environment instead: tempfile's cached directory and wsgiref's
  BaseHandler.os_environ (UNPINNED_READERS). screener itself reads no variable and no
  terminal at import, and nothing creates a rich Console at import: screener.cli.main
  makes one per call from the call's COLUMNS/TERM and stdout, so `COLUMNS=80` gives
  80-column tables as in a fresh process (tests/test_cli_fork.py checks it; a module that
  made a Console at import would have to stay out of PRELOAD, or be reset in become_cli).
- A change to a screener/*.py file since the server started: refused (real process), and
  the server stops; the next call starts a new one.
- Still shared: the hash seed (str hashes, so set order, are the same in every child where
  a fresh process would draw a new seed), resource limits and the CPU affinity of the
  server's start, and /proc/PID/cmdline (the server's).

The server stops when the pytest process that started it closes its end of the server's
stdin (at exit, or killed: the kernel closes it), when its parent changes, or on SIGTERM;
it kills and reaps the children still running.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import importlib
import io
import json
import locale
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal, overload

ENV_SWITCH = "SCREENER_TEST_CLI_FORK"  # "0": every call is a real process
PREFIX = (sys.executable, "-m", "screener.cli")
REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "screener"

# What a CLI call imports, loaded by name before the first fork; what cannot be imported is
# left for the child to import (or fail on) itself. Not screener.report.html (plotly: one
# test file uses it).
PRELOAD = (
    "screener.cli",
    "screener.cli.admin",
    "screener.cli.common",
    "screener.cli.db",
    "screener.cli.hookd",
    "screener.cli.ingest",
    "screener.cli.observe",
    "screener.cli.screen",
    "screener.cli.slurm",
    "screener.cli.spool",
    "screener.cli.trend",
    "screener.app",
    "screener.pipeline",
    "screener.spool",
    "screener.run_marker",
    "screener.store",
    "screener.store.migrate",
    "screener.store.views",
    "screener.store.jobs",
    "screener.store.trend",
    "screener.store.bulk",
    "screener.store.slurm_records",
    "screener.store.pg_connect",
    "screener.run.loop",
    "screener.run.local",
    "screener.report.terminal",
    "screener.ingest.service",
    "screener.ingest.accuracy",
    "screener.ingest.rule_accuracy",
    "screener.slurm.choose",
    "screener.slurm.cli_backend",
    "screener.slurm.rest_backend",
    "screener.metrics",
    "screener.metrics.exporter",
    "screener.metrics.accuracy",
    "screener.metrics.ops",
    "screener.transport.local",
    "screener.transport.asyncssh_transport",
    "screener.prolog.hook",
    "screener.epilog.hook",
    "screener.hooks.drains",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "psycopg",
    "alembic.command",
    "alembic.runtime.migration",
    "alembic.script",
    "mako.template",
    "rich.console",
    "rich.table",
    "prometheus_client",
)
# Variables read at interpreter or C-library startup, not through os.environ: a call that
# changes one runs as a real process.
STARTUP_PREFIXES = ("PYTHON", "LC_", "OPENSSL_")
STARTUP_NAMES = frozenset({"LANG", "LANGUAGE", "TZ"})

START_TIMEOUT_S = 120.0  # the server's imports (~1 s alone; far more on a loaded 2-core box)
REPLY_TIMEOUT_S = 60.0  # connect, "P", and "E" after a kill: the server answers at once
PARENT_CHECK_S = 10.0  # how often an idle server checks that its parent is still there
LOG_NAME = "server.log"  # beside the socket: what the server said (one line per call)


# ---- client -------------------------------------------------------------------------------


@overload
def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = ...,
    cwd: str | os.PathLike[str] | None = ...,
    input: str | None = ...,
    timeout: float | None = ...,
    capture_output: bool = ...,
    text: Literal[True] = ...,
    check: bool = ...,
) -> subprocess.CompletedProcess[str]: ...


@overload
def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = ...,
    cwd: str | os.PathLike[str] | None = ...,
    input: bytes | None = ...,
    timeout: float | None = ...,
    capture_output: bool = ...,
    text: Literal[False],
    check: bool = ...,
) -> subprocess.CompletedProcess[bytes]: ...


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    timeout: float | None = None,
    capture_output: bool = True,
    text: bool = True,
    check: bool = False,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([sys.executable, "-m", "screener.cli", *args], ...)``, forked from
    the server when there is one. ``args`` is the argv after ``-m screener.cli``. stdin is
    ``input`` (str when ``text``), else /dev/null; without ``capture_output`` the child
    writes to this process's stdout and stderr (fds 1 and 2)."""
    argv = _argv(args)
    full = [*PREFIX, *argv]
    if os.environ.get(ENV_SWITCH) == "0":
        return _real(full, env, cwd, input, timeout, capture_output, text, check)
    env_ = dict(os.environ if env is None else env)
    cwd_ = _cwd(cwd)
    with contextlib.ExitStack() as files:
        stdin = files.enter_context(_stdin(input, text))
        out = files.enter_context(tempfile.TemporaryFile()) if capture_output else None
        err = files.enter_context(tempfile.TemporaryFile()) if capture_output else None
        fds = (
            stdin.fileno(),
            1 if out is None else out.fileno(),
            2 if err is None else err.fileno(),
        )
        child = start(argv, env=env_, cwd=cwd_, fds=fds)
        if child is None:
            return _real(full, env, cwd, input, timeout, capture_output, text, check)
        with child:
            try:
                code = child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(REPLY_TIMEOUT_S)
                raise subprocess.TimeoutExpired(
                    full, timeout or 0.0, output=_read(out) or None, stderr=_read(err) or None
                ) from None
        stdout = _decode(_read(out), text) if out is not None else None
        stderr = _decode(_read(err), text) if err is not None else None
    if check and code:
        raise subprocess.CalledProcessError(code, full, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(full, code, stdout, stderr)


def start(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    fds: tuple[int, int, int] = (0, 1, 2),
) -> Forked | None:
    """The CLI call running in a child of the server (what a Popen is for a process), with
    ``fds`` as its stdin, stdout and stderr; None when it is to run as a real process (no
    server, $SCREENER_TEST_CLI_FORK=0, or the server refused: see the module's doc)."""
    if os.environ.get(ENV_SWITCH) == "0":
        return None
    server = _server()
    if server is None:
        return None
    argv = _argv(args)
    request = {
        "argv": argv,
        "env": dict(os.environ if env is None else env),
        "cwd": _cwd(cwd),
        "umask": _status_field("Umask", base=8),
        "sigign": sorted(_signal_set("SigIgn")),
        "sigblk": sorted(_signal_set("SigBlk")),
    }
    data = json.dumps(request).encode() + b"\n"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(REPLY_TIMEOUT_S)
        sock.connect(server.path)
        socket.send_fds(sock, [data[:4096]], list(fds))
        if len(data) > 4096:  # (an empty sendall still writes: EPIPE once refused)
            sock.sendall(data[4096:])
        reader = _Lines(sock)
        word, rest = reader.read(REPLY_TIMEOUT_S)
    except OSError as exc:  # the server is gone or broken: say what its log says
        sock.close()
        raise RuntimeError(f"cli_fork server: {exc!r}; its log: {server.log_tail()}") from exc
    except BaseException:
        sock.close()
        raise
    if word == "P":
        return Forked(int(rest), [*PREFIX, *argv], sock, reader)
    sock.close()
    if word == "R":
        if rest.startswith("stale"):
            server.stop()  # the next call starts a server on the new code
        return None
    raise RuntimeError(f"cli_fork server {server.path}: unexpected reply {word!r} {rest!r}")


class Forked:
    """A CLI call running in a child of the server; its exit code comes from the server,
    which reaps the child (so kill() never hits a recycled pid)."""

    def __init__(self, pid: int, args: list[str], sock: socket.socket, reader: _Lines) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._sock = sock
        self._reader = reader

    def wait(self, timeout: float | None = None) -> int:
        """The returncode (negative: killed by that signal); subprocess.TimeoutExpired if
        the child is still running after ``timeout`` seconds (it keeps running)."""
        if self.returncode is not None:
            return self.returncode
        try:
            word, rest = self._reader.read(timeout)
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None
        if word != "E":
            raise RuntimeError(
                f"cli_fork: the server ended without the exit code of child {self.pid}"
                f" ({'connection closed' if not word else repr(word + ' ' + rest)})"
            )
        self.returncode = int(rest)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the child (the server does it, if the child is not gone already)."""
        if self.returncode is None:
            with contextlib.suppress(OSError):
                self._sock.sendall(b"K\n")

    def close(self) -> None:
        """Done with it; a child still running is killed by the server."""
        self._sock.close()

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class _Lines:
    """Lines ``WORD REST`` from a socket, with a timeout per read (a buffered file object
    is undefined after a socket timeout)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def read(self, timeout: float | None) -> tuple[str, str]:
        """(word, rest) of the next line, ("", "") at the end; TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("timed out")
            self._sock.settimeout(left)
            try:
                more = self._sock.recv(4096)
            except ConnectionResetError:
                more = b""
            if not more:
                return "", ""
            self._buf += more
        line, _, self._buf = self._buf.partition(b"\n")
        word, _, rest = line.decode().partition(" ")
        return word, rest


def _argv(args: Sequence[str]) -> list[str]:
    argv = list(args)
    if argv[:1] == [sys.executable] or argv[:2] == ["-m", "screener.cli"]:
        raise ValueError(f"cli_fork takes the argv after `python -m screener.cli`, not {argv}")
    if not all(isinstance(a, str) for a in argv):
        raise TypeError(f"cli_fork: every argument must be a str: {argv!r}")
    return argv


def _cwd(cwd: str | os.PathLike[str] | None) -> str:
    """The child's cwd, absolute; FileNotFoundError/NotADirectoryError as subprocess says."""
    if cwd is None:
        return os.getcwd()
    path = os.path.abspath(os.fspath(cwd))
    with os.scandir(path):  # raises what Popen would for a missing or non-directory cwd
        return path


def _stdin(data: str | bytes | None, text: bool) -> IO[bytes]:
    """The child's stdin: /dev/null, or a file holding ``data`` (encoded as subprocess
    would in text mode)."""
    if data is None:
        return open(os.devnull, "rb")
    if text != isinstance(data, str):
        raise TypeError(f"input must be {'str' if text else 'bytes'} with text={text}")
    raw = data.encode(locale.getpreferredencoding(False)) if isinstance(data, str) else data
    f = tempfile.TemporaryFile()  # noqa: SIM115 (the caller enters it)
    f.write(raw)
    f.seek(0)
    return f


def _read(f: IO[bytes] | None) -> bytes:
    if f is None:
        return b""
    f.seek(0)
    data: bytes = f.read()
    return data


def _decode(data: bytes, text: bool) -> str | bytes:
    if not text:
        return data
    # as subprocess does in text mode: locale encoding, universal newlines
    out = data.decode(locale.getpreferredencoding(False))
    return out.replace("\r\n", "\n").replace("\r", "\n")


def _real(
    full: list[str],
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    input: str | bytes | None,
    timeout: float | None,
    capture_output: bool,
    text: bool,
    check: bool,
) -> subprocess.CompletedProcess[Any]:
    return subprocess.run(
        full,
        env=env,
        cwd=cwd,
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        timeout=timeout,
        capture_output=capture_output,
        text=text,
        check=check,
    )


def _status_field(name: str, base: int = 16) -> int:
    """A field of this thread's /proc status: its umask, its signal masks (per thread)."""
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return int(value.strip(), base)
    raise KeyError(name)


def _signal_set(name: str) -> set[int]:
    """Signals of a /proc status mask (SigIgn: ignored, SigBlk: blocked): bit n-1 is n."""
    mask = _status_field(name)
    return {n for n in range(1, mask.bit_length() + 1) if mask >> (n - 1) & 1}


@dataclass
class _Server:
    """This process's server: its socket path and the pipe that keeps it alive."""

    proc: subprocess.Popen[bytes]
    path: str
    owner: int = field(default_factory=os.getpid)

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            said = Path(os.path.dirname(self.path), LOG_NAME).read_text(errors="replace")
        except OSError as exc:
            return f"({exc})"
        return " | ".join(said.strip().splitlines()[-lines:])

    def stop(self) -> None:
        """Close the keepalive (the server exits, killing what still runs), then reap it."""
        if self.owner != os.getpid():
            return
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(REPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


_LOCK = threading.Lock()
_SERVER: _Server | None = None
_BROKEN: tuple[int, str] | None = None  # (pid, why): the server of this process failed


def _server() -> _Server | None:
    """This process's server, started on first use; None (with one warning) if it cannot
    start: the calls then run as real processes."""
    global _SERVER, _BROKEN
    with _LOCK:
        if _SERVER is not None and _SERVER.alive():
            return _SERVER
        if _BROKEN is not None and _BROKEN[0] == os.getpid():
            return None
        if _SERVER is not None and _SERVER.owner == os.getpid():
            _SERVER.stop()  # it stopped (stale code) or died: start another
        _SERVER = None
        try:
            _SERVER = _start_server()
        except (OSError, RuntimeError) as exc:
            _BROKEN = (os.getpid(), str(exc))
            warnings.warn(
                f"cli_fork: no fork server ({exc}); CLI calls run as real processes",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        return _SERVER


def stop_server() -> None:
    """Stop this process's server, if any; the next call starts another."""
    global _SERVER, _BROKEN
    with _LOCK:
        if _SERVER is not None:
            _SERVER.stop()
        _SERVER = _BROKEN = None


def _start_server() -> _Server:
    where = tempfile.mkdtemp(prefix="screener-cli-fork-")  # mode 0700
    path = os.path.join(where, "cli.sock")
    log_path = os.path.join(where, LOG_NAME)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*PREFIX[:2], "tests.cli_fork", path],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    server = _Server(proc, path)
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(START_TIMEOUT_S) and proc.stdout.readline().startswith(b"ready")
    proc.stdout.close()
    if not ready:
        proc.kill()
        proc.wait()
        said = Path(log_path).read_text(errors="replace").strip().splitlines()[-5:]
        shutil.rmtree(where, ignore_errors=True)
        raise RuntimeError(
            f"the server did not start within {START_TIMEOUT_S:.0f} s"
            f" (exit {proc.returncode}): {' | '.join(said) or 'no output'}"
        )
    atexit.register(server.stop)
    return server


# ---- server -------------------------------------------------------------------------------


@dataclass
class _Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    umask: int
    sigign: list[int]
    sigblk: list[int]
    fds: list[int]


@dataclass
class _Child:
    conn: socket.socket | None
    pidfd: int
    argv: list[str]


class _Stop(Exception):
    """SIGTERM: stop serving."""


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise _Stop


def serve(path: str) -> _Request | None:
    """Serve on ``path`` until told to stop (None), or, in a forked child, return its
    request: the caller turns the process into the CLI call."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: pytest ends, then the keepalive
    signal.signal(signal.SIGTERM, _on_sigterm)
    with _env_reads() as read_at_import:
        missing = _preload()
    # What the imports made is never garbage: out of the collector's sight, a child's
    # collections and its exit (the interpreter's, as in a fresh process) do not walk, and
    # so copy, every page of it (~0.3 s of CPU per child otherwise).
    gc.collect()
    gc.freeze()
    stamp = _fingerprint()
    env_at_start = dict(os.environ)
    watched = read_at_import | {k for k in env_at_start if _startup_var(k)}
    from screener.hook_server.server import bind  # hookd's: mode 0600, a stale file replaced

    listener = bind(path)
    pid = os.getpid()
    _log(f"pid {pid} serving {path}; watched variables: {' '.join(sorted(watched))}")
    if missing:
        _log(f"not preloaded: {', '.join(missing)}")
    # "ready" on stdout (a pipe the client reads), then stdout is /dev/null
    os.write(1, b"ready\n")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(0, selectors.EVENT_READ, "keepalive")
    children: dict[int, _Child] = {}
    orphaned = False  # the client is gone: nobody else removes the directory
    try:
        while True:
            events = sel.select(PARENT_CHECK_S)
            if os.getppid() != parent:
                _log("parent gone: stopping")
                orphaned = True
                return None
            for key, _mask in events:
                what = key.data
                if what == "keepalive":
                    if not os.read(0, 4096):
                        orphaned = True
                        return None
                elif what == "accept":
                    conn, _ = listener.accept()
                    outcome = _accept(conn, stamp, env_at_start, watched, children, sel)
                    if isinstance(outcome, _Request):  # the forked child
                        _child_cleanup(sel, listener, children)
                        return outcome
                    if outcome == "stale":
                        _log("screener changed since the server started: stopping")
                        return None
                elif what[1] not in children:  # reaped earlier in this batch of events
                    continue
                elif what[0] == "exit":
                    _reap(what[1], children, sel)
                else:
                    _from_client(what[1], children, sel)
    except _Stop:
        _log("SIGTERM: stopping")
        return None
    finally:
        if os.getpid() == pid:  # the server only, never a forked child on its way out
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _stop_children(children)
            sel.close()
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            if orphaned:  # the log and the directory too (rmdir: only if nothing else)
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(os.path.dirname(path), LOG_NAME))
                    os.rmdir(os.path.dirname(path))


def _accept(
    conn: socket.socket,
    stamp: str,
    env_at_start: dict[str, str],
    watched: set[str],
    children: dict[int, _Child],
    sel: selectors.BaseSelector,
) -> _Request | str | None:
    """Read one request and fork its child: the child gets its _Request back; the server
    None, or "stale" (refused: the server stops)."""
    fds: list[int] = []
    in_child = kept = False
    try:
        conn.settimeout(REPLY_TIMEOUT_S)
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        while data and not data.endswith(b"\n"):
            more = conn.recv(1 << 16)
            if not more:
                break
            data += more
        request = _Request(**json.loads(data), fds=fds)
        refusal = _refusal(request, stamp, env_at_start, watched)
        if refusal:
            conn.sendall(f"R {refusal}\n".encode())
            return "stale" if refusal.startswith("stale") else None
        sys.stdout.flush()
        sys.stderr.flush()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        pid = os.fork()
        if pid == 0:  # the child (signals blocked until become_cli set its own)
            in_child = True
            conn.close()
            return request
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        pidfd = os.pidfd_open(pid)
        children[pid] = _Child(conn, pidfd, request.argv)
        kept = True  # the child's entry owns conn now
        sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
        conn.settimeout(None)
        try:
            conn.sendall(f"P {pid}\n".encode())
        except OSError:  # the caller is gone already: kill it, reap it when it is gone
            _from_client(pid, children, sel, gone=True)
            return None
        sel.register(conn, selectors.EVENT_READ, ("conn", pid))
        return None
    except (OSError, ValueError, TypeError) as exc:  # a bad request costs that call only
        _log(f"bad request: {type(exc).__name__}: {exc}")
        return None
    finally:
        if not in_child:
            for fd in fds:
                os.close(fd)
            if not kept:
                conn.close()


def _refusal(request: _Request, stamp: str, env_at_start: dict[str, str], watched: set[str]) -> str:
    """Why this call must run as a real process ("" = it may be forked)."""
    if len(request.fds) != 3:
        return f"expected stdin, stdout and stderr, got {len(request.fds)} descriptors"
    for name in sorted(watched | {k for k in request.env if _startup_var(k)}):
        if request.env.get(name) != env_at_start.get(name):
            return f"${name} differs from the server's (read at import or at startup)"
    if _fingerprint() != stamp:
        return "stale: screener changed since the server started"
    return ""


def _from_client(
    pid: int, children: dict[int, _Child], sel: selectors.BaseSelector, gone: bool = False
) -> None:
    """ "K" or the end of the caller's connection: kill the child (not reaped yet, so the
    pid is still this child's)."""
    child = children[pid]
    data = b""
    if not gone and child.conn is not None:
        try:
            data = child.conn.recv(64)
        except OSError:
            data = b""
    if data.startswith(b"K") or not data:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not data and child.conn is not None:
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(child.conn)
        child.conn.close()
        child.conn = None


def _reap(pid: int, children: dict[int, _Child], sel: selectors.BaseSelector) -> None:
    child = children.pop(pid)
    sel.unregister(child.pidfd)
    os.close(child.pidfd)
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    _log(f"child {pid} {' '.join(child.argv[:2])}: exit {code}, {cpu:.3f} s CPU")
    if child.conn is not None:
        with contextlib.suppress(OSError):
            child.conn.sendall(f"E {code}\n".encode())
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(child.conn)
        child.conn.close()


def _stop_children(children: dict[int, _Child]) -> None:
    for pid, child in children.items():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(child.pidfd)
        if child.conn is not None:
            child.conn.close()
    children.clear()


def _child_cleanup(
    sel: selectors.BaseSelector, listener: socket.socket, children: dict[int, _Child]
) -> None:
    """In a new child: drop the server's descriptors (a fresh process has only 0, 1, 2)."""
    for child in children.values():
        os.close(child.pidfd)
        if child.conn is not None:
            child.conn.close()
    children.clear()
    sel.close()
    listener.close()


def become_cli(request: _Request) -> None:
    """Turn this forked child into ``python -m screener.cli ARGV`` and run it; never
    returns: its SystemExit (or exception) ends the interpreter as in a fresh process."""
    # Signals as a fresh interpreter started by subprocess has them: the caller's ignored
    # ones stay ignored (except SIGPIPE/SIGXFSZ, reset by subprocess, then ignored by
    # Python), SIGINT raises KeyboardInterrupt, the rest default. Still blocked since fork.
    ignored = set(request.sigign)
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if signum in (signal.SIGPIPE, signal.SIGXFSZ) or signum in ignored:
            handler: Any = signal.SIG_IGN
        elif signum == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
    for fd in request.fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    os.umask(request.umask)
    # `python -m` puts the cwd first on sys.path, and names itself in argv
    sys.path[0] = os.getcwd()
    sys.argv = [str(PACKAGE / "cli" / "__main__.py"), *request.argv]
    sys.orig_argv = [*PREFIX, *request.argv]
    # Module state the imports derived from the server's environment, redone from the
    # call's: tempfile's directory (cached when asyncssh's import made a temporary file),
    # wsgiref's copy of the environment.
    tempfile.tempdir = None
    handlers = sys.modules.get("wsgiref.handlers")
    if handlers is not None:
        handlers.BaseHandler.os_environ = handlers.read_environ()
    # stdout is line-buffered on a terminal only (the server's stdout was a pipe)
    if isinstance(sys.stdout, io.TextIOWrapper) and not isinstance(sys.stdout.buffer, io.RawIOBase):
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    signal.pthread_sigmask(signal.SIG_SETMASK, set(request.sigblk))
    runpy.run_module("screener.cli", run_name="__main__", alter_sys=True)
    sys.exit(0)  # a __main__ that returns (today's ends in sys.exit(main())): exit 0


def _preload() -> list[str]:
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional dependency: the child imports it, or fails
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    return missing


# Reads of the environment at import that do not pin a variable: ctypes.util runs gcc and
# ldconfig with a copy of it to find a library (asyncssh's optional liboqs and nettle);
# wsgiref.handlers copies it into BaseHandler.os_environ (prometheus_client's HTTP server),
# which the child refreshes from its own environment (become_cli).
UNPINNED_READERS = (os.path.join("ctypes", "util.py"), os.path.join("wsgiref", "handlers.py"))


@contextlib.contextmanager
def _env_reads() -> Iterator[set[str]]:
    """The names read through os.environ (get, [], in, getenv, items) meanwhile: what the
    imports fixed from the server's environment (but UNPINNED_READERS' reads)."""
    names: set[str] = set()
    environ_type = type(os.environ)
    original = environ_type.__getitem__

    def spy(self: Any, key: Any) -> Any:
        if not _read_by(sys._getframe(1), UNPINNED_READERS):
            names.add(key.decode(errors="replace") if isinstance(key, bytes) else str(key))
        return original(self, key)

    environ_type.__getitem__ = spy  # type: ignore[method-assign]
    try:
        yield names
    finally:
        environ_type.__getitem__ = original  # type: ignore[method-assign]


def _read_by(frame: FrameType | None, files: tuple[str, ...]) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith(files):
            return True
        frame = frame.f_back
    return False


def _startup_var(name: str) -> bool:
    return name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES)


def _fingerprint() -> str:
    """Path, size and mtime of every screener module (~1 ms)."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile: still a change
            st = path.stat()
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _log(line: str) -> None:
    print(f"cli_fork: {line}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.cli_fork SOCKET", file=sys.stderr)
        return 2
    try:
        request = serve(argv[0])
    except BaseException:
        traceback.print_exc()
        raise
    if request is None:
        return 0
    become_cli(request)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
