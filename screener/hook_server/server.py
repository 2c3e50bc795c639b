"""`screener hookd`: import screener once, then fork one worker per hook run.

Each worker is what a fresh `screener prolog|epilog` process would be: the hook's argv,
environment, working directory and stdin/stdout/stderr, its own signals and exit code;
only the imports are already done. The server itself holds no engine, loop or thread, so
a fork copies nothing that a hook could share by mistake. A worker that finds the package
changed since the server started refuses (the hook runs in its own process) and the server
exits so systemd restarts it on the new code. It serves only from a directory no other
user can write or swap (a symlink): whoever could replace the socket would be handed the
hooks' environments.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import signal
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from screener.hook_server.wire import (
    ACCEPTED,
    EXIT,
    GO,
    HOOKS,
    MAX_REQUEST,
    REFUSED,
    SIGNAL,
    decode_request,
    package_dir,
    read_line,
)

# What a hook run imports, loaded by name before the first fork (the ~1 s each hook saves).
# Only layers below this one (tests/test_layers.py checks): screener.cli is the caller's,
# already loaded, since `screener hookd` (cli/hookd.py) is what calls serve().
PRELOAD = (
    "screener.prolog.hook",
    "screener.prolog.execute",
    "screener.epilog.hook",
    "screener.prolog.sentinel",
    "screener.prolog.triage",
    "screener.hooks.drains",
    "screener.app",
    "screener.pipeline",
    "screener.store",
    "screener.store.slurm_records",
    "screener.slurm.choose",
    "screener.transport.asyncssh_transport",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
)
# A worker's exit status when the package changed under the server: the server exits too.
STALE = 75
# Seconds a worker waits for the hook's request and its "go".
REQUEST_TIMEOUT_S = 5.0


def fingerprint(root: str) -> str:
    """Path, size and mtime of every module of the package: ~1 ms, done per hook run."""
    h = hashlib.sha256()
    for path in sorted(Path(root).rglob("*.py")):
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def preload() -> list[str]:
    """Import PRELOAD; what could not be imported (the hook then imports it itself)."""
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional driver (psycopg) may be absent
            missing.append(f"{name} ({type(exc).__name__})")
    return missing


def check_socket_dir(path: str) -> None:
    """OSError (one line) unless the socket's directory is a real directory (lstat: a
    symlink is not followed), owned by this user or root and writable by nobody else:
    another user who can write there can put their own socket in the hooks' path."""
    where = os.path.dirname(os.path.abspath(path))
    st = os.lstat(where)
    own = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        why = f"is a symlink (to {os.readlink(where)}), not followed"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid not in (own, 0):
        why = f"is owned by uid {st.st_uid}, not by this user ({own}) or root"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    else:
        return
    raise OSError(f"{where} {why}; serve from a directory only this user can write (0700)")


def bind(path: str) -> socket.socket:
    """A listening socket at ``path``, mode 0600; a stale socket file is replaced, a live
    server's is not (OSError)."""
    if os.path.exists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)  # nobody listens: a stale socket left by a killed server
        else:
            raise OSError(f"{path}: another screener hookd is listening")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    sock.listen(64)
    return sock


After = Callable[[int], int]  # work after the exit code is out: how many steps ran


def serve(
    path: str,
    run: Callable[[list[str]], int],
    say: IO[str] = sys.stderr,
    after: After | None = None,
) -> int:
    """Listen on ``path`` until SIGTERM/SIGINT (exit 0) or a stale worker (exit STALE);
    each worker runs its hook as ``run(argv)`` (`screener.cli.main`, passed in by the
    command: this module imports no layer above its own), sends the exit code, then calls
    ``after(code)`` (the hook's deferred work) with the hook's stdio already let go. An
    unsafe socket directory is an OSError before the ~1 s of imports."""
    check_socket_dir(path)
    root = package_dir()
    missing = preload()
    print_ = _printer(say)
    stamp = fingerprint(root)
    listener = bind(path)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    listener.settimeout(1.0)  # to reap workers and see `stop` without a thread
    print_(
        f"listening on {path} (pid {os.getpid()}, package {root}"
        + (f"; not preloaded: {', '.join(missing)}" if missing else "")
        + ")"
    )
    workers: dict[int, float] = {}
    code = 0
    try:
        while not stop.is_set():
            if _reap(workers):
                print_("screener changed since hookd started: exiting (restart it)")
                code = STALE
                break
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except InterruptedError:
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                listener.close()
                _worker(conn, root, stamp, run, after)
            conn.close()
            workers[pid] = time.monotonic()
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
    _reap(workers)  # those already done are not "still finishing"
    print_(f"stopped ({len(workers)} hook run(s) still finishing on their own)")
    return code


def _printer(say: IO[str]) -> Callable[[str], None]:
    def p(line: str) -> None:
        print(f"screener hookd: {line}", file=say, flush=True)

    return p


def _reap(workers: dict[int, float]) -> bool:
    """Collect finished workers; True if one found the package stale."""
    stale = False
    while workers:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            workers.clear()
            break
        if pid == 0:
            break
        workers.pop(pid, None)
        stale = stale or os.waitstatus_to_exitcode(status) == STALE
    return stale


def _worker(
    conn: socket.socket,
    root: str,
    stamp: str,
    run: Callable[[list[str]], int],
    after: After | None = None,
) -> None:
    """Run one hook as the hook's own process would, then exit (os._exit: no cleanup of the
    server's state runs twice)."""
    status = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        status = _serve_one(conn, root, stamp, run, after)
    except BaseException:  # nothing may escape into the server's loop
        status = 1
    finally:
        os._exit(status)


def _serve_one(
    conn: socket.socket,
    root: str,
    stamp: str,
    run: Callable[[list[str]], int],
    after: After | None = None,
) -> int:
    conn.settimeout(REQUEST_TIMEOUT_S)
    uid = _peer_uid(conn)
    if uid not in (os.getuid(), 0):
        _say(conn, f"{REFUSED} uid {uid} may not use this hookd (it runs as {os.getuid()})")
        return 0
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    try:
        while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
            more = conn.recv(65536)
            if not more:
                return 0
            data += more
        request = decode_request(data)
        refusal = _refusal(request, root, stamp, fds)
        if refusal:
            _say(conn, f"{REFUSED} {refusal}")
            return STALE if refusal.startswith("stale") else 0
        _say(conn, ACCEPTED)
        stream = conn.makefile("rb")
        if read_line(stream)[0] != GO:  # the hook gave up waiting: it runs the hook itself
            return 0
        conn.settimeout(None)
        journal = os.fdopen(os.dup(2), "w")  # the server's stderr, before it is the hook's
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
    finally:
        for fd in fds:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["screener", *request["argv"]]
    done = threading.Event()
    threading.Thread(target=_watch, args=(stream, done), daemon=True).start()
    t0 = time.monotonic()
    code = 1
    try:
        code = run(request["argv"])
    finally:
        done.set()
        sys.stdout.flush()
        sys.stderr.flush()
        job = request["env"].get("SLURM_JOB_ID", "?")
        said = f"{request['argv'][0]} job {job} (worker {os.getpid()}, uid {uid})"
        _printer(journal)(f"{said}: exit {code} in {time.monotonic() - t0:.2f} s")
    _let_go()
    _say(conn, f"{EXIT} {code}")
    if after is not None:
        t1 = time.monotonic()
        steps = after(code)
        if steps:
            _printer(journal)(f"{said}: {steps} deferred step(s) in {time.monotonic() - t1:.2f} s")
    return 0


def _let_go() -> None:
    """Point stdin/stdout/stderr at /dev/null: slurmctld reads a hook's output until EOF,
    so deferred work must not hold the hook's descriptors open."""
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(null, target)
    os.close(null)


def _refusal(request: dict[str, object], root: str, stamp: str, fds: list[int]) -> str:
    """Why this worker will not run the request ("" = it will)."""
    argv = request["argv"]
    assert isinstance(argv, list)
    if not argv or argv[0] not in HOOKS:
        return f"hookd runs only {' and '.join(HOOKS)}, not {argv[:1]}"
    if len(fds) != 3:
        return f"expected stdin, stdout and stderr, got {len(fds)} descriptors"
    if request["package"] != root:
        return f"the hook runs screener from {request['package']}, hookd from {root}"
    if fingerprint(root) != stamp:
        return f"stale: screener in {root} changed since hookd started"
    return ""


def _watch(stream: IO[bytes], done: threading.Event) -> None:
    """The hook's signals, forwarded; its end (slurmctld killed it) is a SIGTERM: the run
    stops as an in-process hook would have on PrologEpilogTimeout."""
    while True:
        try:
            word, rest = read_line(stream)
        except OSError:
            word, rest = "", ""
        if done.is_set():
            return
        if word == SIGNAL and rest.isdigit():
            os.kill(os.getpid(), int(rest))
        elif not word:
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def _say(conn: socket.socket, line: str) -> None:
    conn.sendall(f"{line}\n".encode())
