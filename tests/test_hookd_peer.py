"""Who may serve the hooks (issue 41, item 4): the hookd client hands a hook (its whole
environment, the database URL included, and its stdin/stdout/stderr) only to a server
running as the hook's own uid or root, and obeys only that server's exit code; hookd
serves only from a directory no other user can write or swap for a symlink.

The fake servers are forked children of this process (only os and socket calls, then
_exit) running as the uid each case names. Each records every byte and descriptor it
receives and answers as a hostile hookd would: accepted, then "exit 1" (Slurm requeues).
A server of our own uid that is really used: tests/test_hookd.py (every test there).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from screener.hook_server.client import via_hookd
from screener.hook_server.wire import ENV_SOCKET, FALLBACK_ENV
from tests.test_prolog_failopen import JOB, SCREENER, config, hook

NOBODY = 65534
OTHER = 65533  # another unprivileged uid (no passwd entry needed)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs processes as other uids")


def _become(uid: int) -> None:
    """In a forked child: drop to ``uid`` (its gid the same number, no groups)."""
    if uid != os.geteuid():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def _record(path: Path, out: int) -> None:
    """The fake server's body: listen, say so on ``out``, take one connection, answer a
    request with "accepted" and a "go" with "exit 1", write what it got, as one JSON line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        os.chmod(path, 0o666)  # any uid may connect: trusting the server is the client's job
        listener.listen(1)
        listener.settimeout(60)  # a client that never connects fails the test, not hangs it
        os.write(out, b"listening\n")
        conn, _ = listener.accept()
        got, fds, answered = b"", 0, 0
        with conn:
            conn.settimeout(60)
            while True:
                data, passed, _flags, _addr = socket.recv_fds(conn, 65536, 8)
                for fd in passed:
                    os.close(fd)
                fds += len(passed)
                if not data:
                    break
                got += data
                lines = got.count(b"\n")  # the request is one line, then the hook's "G"
                if lines >= 1 and answered == 0:
                    conn.sendall(b"A\n")
                    answered = 1
                if lines >= 2 and answered == 1:
                    conn.sendall(b"E 1\n")
                    answered = 2
    os.write(out, json.dumps({"connected": True, "bytes": len(got), "fds": fds}).encode() + b"\n")


class FakeHookd:
    """A hostile hookd on ``path`` as ``uid``, listening once the constructor returns."""

    def __init__(self, path: Path, uid: int) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the fake: only os and socket calls, then _exit
            code = 1
            try:
                os.close(read)
                _become(uid)
                _record(path, write)
                code = 0
            except BaseException as exc:
                os.write(write, json.dumps({"error": repr(exc)}).encode() + b"\n")
            finally:
                os._exit(code)
        os.close(write)
        self.pid = pid
        self.out = os.fdopen(read, "rb")
        ready = self.out.readline()
        assert ready == b"listening\n", ready

    def report(self) -> dict[str, Any]:
        """What it received from its one client (once that client closed the connection)."""
        try:
            return dict(json.loads(self.out.readline()))
        finally:
            self.out.close()
            os.waitpid(self.pid, 0)


def via_hookd_as(uid: int, path: Path) -> tuple[int | None, str | None]:
    """`via_hookd(["prolog"])` run as ``uid`` in a forked child with $SCREENER_HOOKD_SOCKET
    = ``path``: its result and the fallback reason it left for the hook's log."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only the client (stdlib) and os calls, then _exit
        code = 1
        try:
            os.close(read)
            _become(uid)
            os.environ[ENV_SOCKET] = str(path)
            os.environ.pop(FALLBACK_ENV, None)
            result = via_hookd(["prolog"])
            os.write(write, json.dumps([result, os.environ.get(FALLBACK_ENV)]).encode())
            code = 0
        except BaseException as exc:
            os.write(write, json.dumps(["error", repr(exc)]).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        result, why = json.loads(f.read())
    os.waitpid(pid, 0)
    assert result != "error", why
    return result, why


@pytest.fixture()
def socket_dir() -> Iterator[Callable[[int], Path]]:
    """Directories in /tmp (traversable by every uid, unlike tmp_path), each owned by the
    uid it is made for, mode 0711; removed at the end."""
    made: list[Path] = []

    def make(uid: int) -> Path:
        d = Path(tempfile.mkdtemp(prefix="screener-peer-"))
        made.append(d)
        os.chown(d, uid, uid)
        d.chmod(0o711)
        return d

    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------ the client: whose server


@pytest.mark.parametrize(
    ("client", "server"),
    [(0, NOBODY), (NOBODY, OTHER)],
    ids=["root's hook, nobody's server", "nobody's hook, another user's server"],
)
def test_a_server_of_another_uid_gets_nothing_and_the_hook_runs_here(
    socket_dir: Callable[[int], Path], client: int, server: int
) -> None:
    # Not one byte of the environment, no descriptor, and its "exit 1" never obeyed: the
    # client reads the server's uid (SO_PEERCRED) before it sends anything.
    path = socket_dir(server) / "hookd.sock"
    fake = FakeHookd(path, server)
    result, why = via_hookd_as(client, path)
    assert fake.report() == {"connected": True, "bytes": 0, "fds": 0}
    assert result is None  # the hook runs in its own process
    assert why == (
        f"{path}: served by uid {server}, not this hook's uid ({client}) or root: not trusted"
    )


@pytest.mark.parametrize(
    ("client", "server"),
    [(NOBODY, NOBODY), (NOBODY, 0)],
    ids=["its own uid", "root"],
)
def test_a_server_of_the_hooks_own_uid_or_root_gets_the_hook(
    socket_dir: Callable[[int], Path], client: int, server: int
) -> None:
    # The check refuses no legitimate server (passes on the code before it too): the
    # request with the three stdio descriptors goes out, and the server's exit code is the
    # hook's.
    path = socket_dir(server) / "hookd.sock"
    fake = FakeHookd(path, server)
    result, why = via_hookd_as(client, path)
    got = fake.report()
    assert (result, why) == (1, None)
    assert got["bytes"] > 0 and got["fds"] == 3, got


def test_the_prolog_hands_nothing_to_another_users_socket_and_runs_itself(
    tmp_path: Path, socket_dir: Callable[[int], Path]
) -> None:
    # The real console script as slurmctld runs it, $SCREENER_HOOKD_SOCKET naming nobody's
    # socket: the fake gets nothing, and the job (not opted in) is let through by the hook
    # itself (exit 0), not requeued by the fake's "exit 1"; its log says why.
    path = socket_dir(NOBODY) / "hookd.sock"
    fake = FakeHookd(path, NOBODY)
    res = hook("prolog", config(tmp_path), {**JOB, "SLURM_JOB_COMMENT": "", ENV_SOCKET: str(path)})
    assert fake.report() == {"connected": True, "bytes": 0, "fds": 0}
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    first, second = res.stderr.strip().splitlines()
    assert "screener hookd not used" in first and "running in this process" in first, first
    assert f"{path}: served by uid {NOBODY}, not this hook's uid (0) or root" in first, first
    assert "job 77: not screened" in second, second
    assert "served by uid 65534" in (tmp_path / "prolog.log").read_text()


# ------------------------------------------------------------------ the server: where it serves


def _shared(mode: int) -> Callable[[Path], Path]:
    """A directory of ours that others (or our group) can write: ``mode`` 0777, 1777, 0770."""

    def make(base: Path) -> Path:
        d = base / "shared"
        d.mkdir()
        d.chmod(mode)
        return d

    return make


def _nobodys(base: Path) -> Path:
    """A private directory (0700) of another user's: it could swap our socket."""
    d = base / "nobodys"
    d.mkdir(mode=0o700)
    os.chown(d, NOBODY, NOBODY)
    return d


def _symlink(base: Path) -> Path:
    """A symlink to a good directory: whoever can write the link's dir can repoint it."""
    real = base / "real"
    real.mkdir(mode=0o700)  # a fine directory, named through a link
    (base / "link").symlink_to(real)
    return base / "link"


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (_shared(0o777), "is writable by group or others (mode 0777)"),
        (_shared(0o1777), "is writable by group or others (mode 1777)"),
        (_shared(0o770), "is writable by group or others (mode 0770)"),
        (_nobodys, f"is owned by uid {NOBODY}, not by this user (0) or root"),
        (_symlink, "is a symlink (to "),
    ],
    ids=["world-writable", "sticky like /tmp", "group-writable", "another user's", "symlink"],
)
def test_hookd_will_not_serve_from_a_directory_others_can_write_or_swap(
    tmp_path: Path, make: Callable[[Path], Path], why: str
) -> None:
    # Whoever can write the socket's directory can put their own socket in the hooks' path
    # once hookd is down: hookd refuses to start there, one line, exit 1, no socket made.
    d = make(tmp_path)
    path = d / "hookd.sock"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SCREENER_"))}
    proc = subprocess.Popen(
        [SCREENER, "hookd", "--socket", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=base,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # a server that serves says "listening on" here
        assert first.startswith(f"screener: error: cannot serve on {path}: {d} {why}"), first
        _, rest = proc.communicate(timeout=60)
        assert proc.returncode == 1 and rest == "", (proc.returncode, rest)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=30)
    assert list(d.iterdir()) == []  # no socket (through the link: none in its target)
