"""Private PostgreSQL clusters for outage, failover and load tests.

The shared server on 127.0.0.1:5432 is everyone's: tests that stop, promote or starve a
server make their own with Debian's pg_createcluster, on a free 127.0.0.1 port, trust auth,
a database ``test``, and drop it at the end (even on failure). Names carry the pytest-xdist
worker and the pid, so parallel workers never collide; leftovers of dead pids are dropped.

    with private_cluster("fo", max_connections="20") as pg:    # pg.url: SQLAlchemy URL
        with standby_of(pg, "fo_sb") as sb:                     # streaming, replaying
            pg.stop(); sb.promote()
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.store_fixtures import _pid_alive

PREFIX = "scrpg_"  # every private cluster's name starts so; the pid follows the worker
TIMEOUT_S = 60.0
FULL_WAIT_S = 30.0  # connect(): how long a server with every slot taken is retried
# Fast and small: test data need not survive an OS crash (a stop of the server is fine).
DEFAULTS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_wal_senders": "5",
    "wal_level": "replica",
}
HBA = (
    "local all all trust\n"
    "host all all 127.0.0.1/32 trust\n"
    "local replication all trust\n"
    "host replication all 127.0.0.1/32 trust\n"
)


class PgPrivateError(RuntimeError):
    """A private cluster could not be made, started or stopped (the command's own words)."""


def _run(argv: list[str], timeout: float = TIMEOUT_S) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise PgPrivateError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def pg_version() -> str:
    """The installed server's major version (the one /etc/postgresql holds)."""
    versions = sorted((p.name for p in Path("/etc/postgresql").iterdir()), key=int)
    if not versions:
        raise PgPrivateError("no PostgreSQL server installed (/etc/postgresql is empty)")
    return versions[-1]


def _free_port() -> int:
    """A 127.0.0.1 TCP port nobody listens on now (the kernel's pick, not a guess)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unique(name: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,30}", name):
        raise ValueError(f"cluster name {name!r}: use lower-case letters, digits and _")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{PREFIX}{os.getpid()}_{worker}_{name}"


def drop_stale(version: str) -> None:
    """Drop private clusters whose creating process is gone (a killed test session)."""
    base = Path("/etc/postgresql") / version
    for conf in base.glob(f"{PREFIX}*"):
        m = re.match(rf"{PREFIX}(\d+)_", conf.name)
        if m and not _pid_alive(int(m.group(1))):
            subprocess.run(
                ["pg_dropcluster", "--stop", version, conf.name],
                capture_output=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            shutil.rmtree(conf, ignore_errors=True)  # our conf.d, which pg_dropcluster leaves


@dataclass
class PgCluster:
    """One private cluster: where it is and how to stop, start or promote it."""

    name: str
    version: str
    port: int
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/test"

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, as a multi-host URL's ``host=`` parameter names it."""
        return f"127.0.0.1:{self.port}"

    @property
    def datadir(self) -> Path:
        return Path("/var/lib/postgresql") / self.version / self.name

    def _ctl(self, action: str, *extra: str) -> None:
        _run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action, *extra]
        )

    def connect(self, dbname: str = "test") -> psycopg.Connection[tuple[object, ...]]:
        """A direct autocommit connection (for setup and checks, not through screener).
        A server whose slots are all taken is retried for up to FULL_WAIT_S: a closed
        client's backend frees its slot only when it has exited, which under load comes
        after the close returned (a check right after a test's held connections closed
        saw "too many clients" in CI)."""
        deadline = time.monotonic() + FULL_WAIT_S
        while True:
            try:
                return psycopg.connect(
                    host="127.0.0.1",
                    port=self.port,
                    user="postgres",
                    dbname=dbname,
                    autocommit=True,
                    connect_timeout=5,
                )
            except psycopg.OperationalError as exc:
                if "too many clients" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # polling the server's real state, bounded by the deadline

    def is_up(self) -> bool:
        """True when the server accepts connections."""
        proc = subprocess.run(
            ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "2"],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return proc.returncode == 0

    def in_recovery(self) -> bool:
        with self.connect() as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row and row[0])

    def start(self) -> None:
        self._ctl("start")
        _wait(self.is_up, f"{self.name} to accept connections")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions cut, as a failover manager does) and wait."""
        self._ctl("stop", "-m", mode)
        _wait(lambda: not self.is_up(), f"{self.name} to stop")

    def promote(self) -> None:
        """Promote a standby to primary and wait until it takes writes."""
        self._ctl("promote")
        _wait(lambda: not self.in_recovery(), f"{self.name} to leave recovery")


def _wait(cond: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    """Poll ``cond`` (a connection error counts as not yet) until true or the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except psycopg.Error:
            pass
        if time.monotonic() > deadline:
            raise PgPrivateError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def _create(name: str, settings: dict[str, str]) -> PgCluster:
    version = pg_version()
    drop_stale(version)
    pg = PgCluster(_unique(name), version, _free_port(), {**DEFAULTS, **settings})
    argv = ["pg_createcluster", "--start-conf=manual", "-p", str(pg.port)]
    _run([*argv, version, pg.name, "--", "--no-sync", "--auth-local=trust", "--auth-host=trust"])
    conf = Path("/etc/postgresql") / version / pg.name
    (conf / "pg_hba.conf").write_text(HBA)
    # conf.d (included by Debian's postgresql.conf), every value quoted: pg_createcluster's
    # -o leaves '127.0.0.1' bare, a syntax error.
    lines = (f"{k} = '{v.replace(chr(39), chr(39) * 2)}'\n" for k, v in pg.settings.items())
    (conf / "conf.d").mkdir(exist_ok=True)
    (conf / "conf.d" / "private.conf").write_text("".join(lines))
    return pg


def _drop(pg: PgCluster) -> None:
    """Stop at once (nothing to keep) and remove data, configuration and log."""
    subprocess.run(
        [
            "pg_ctlcluster",
            "--skip-systemctl-redirect",
            pg.version,
            pg.name,
            "stop",
            "-m",
            "immediate",
        ],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    _run(["pg_dropcluster", "--stop", pg.version, pg.name])
    shutil.rmtree(Path("/etc/postgresql") / pg.version / pg.name, ignore_errors=True)  # conf.d


@contextmanager
def private_cluster(name: str, **settings: str) -> Iterator[PgCluster]:
    """A running private cluster with an empty database ``test``; dropped at exit."""
    pg = _create(name, settings)
    try:
        pg.start()
        with pg.connect("postgres") as conn:
            conn.execute("CREATE DATABASE test")
        yield pg
    finally:
        _drop(pg)


@contextmanager
def standby_of(primary: PgCluster, name: str) -> Iterator[PgCluster]:
    """A streaming standby of ``primary`` (pg_basebackup -R) on its own port, replaying."""
    sb = _create(name, primary.settings)
    try:
        for child in sb.datadir.iterdir():  # pg_basebackup wants it empty (kept: postgres's)
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        _run(
            [
                "runuser", "-u", "postgres", "--",
                "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                "-D", str(sb.datadir), "-R", "-X", "stream", "-c", "fast",
            ]
        )  # fmt: skip
        sb.start()
        _wait(lambda: _replaying(primary, sb), f"{sb.name} to replay {primary.name}")
        yield sb
    finally:
        _drop(sb)


def _replaying(primary: PgCluster, sb: PgCluster) -> bool:
    """The standby is in recovery and has replayed everything the primary has written."""
    if not sb.in_recovery():
        return False
    with primary.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_replication"
            " WHERE state = 'streaming' AND replay_lsn >= pg_current_wal_lsn()"
        ).fetchone()
    return bool(row and row[0])
