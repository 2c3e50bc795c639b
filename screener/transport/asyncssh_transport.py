"""AsyncsshTransport: the default fan-out, one multiplexed SSH connection per node.

Client CPU per node is what limits a 1,000-node prolog on a login node, so everything
that does not depend on the host is done once: ssh_config is parsed once, each private
key and known_hosts file is read once, and asyncssh is told not to look for agents, GSS
or config files on every connect. Commands to a node share its connection as channels.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from screener.errors import CommandTimeout, ConfigError, ScreenerError, TransportError
from screener.hostlist import validate_node
from screener.policy import TransportPolicy
from screener.transport.base import (
    CLIENT_GRACE_S,
    CommandResult,
    is_remote_timeout,
    remote_command,
)
from screener.transport.ssh_config import HostConfig, SshConfig

# Key exchange preference: curve25519 is the cheapest strong kex in Python (one X25519
# operation each way) and every OpenSSH since 6.5 offers it; the rest is asyncssh's
# default list minus GSS (no Kerberos here), kept as fallbacks for other servers.
KEX_ALGS = ["curve25519-sha256", "curve25519-sha256@libssh.org"] + [
    alg.decode()
    for alg in asyncssh.kex.get_default_kex_algs()
    if not alg.startswith(b"gss-") and not alg.startswith(b"curve25519-")
]
# AES-GCM runs in OpenSSL with AES-NI; chacha20-poly1305 as fallback. Payloads are tiny,
# this matters less than kex but costs nothing.
ENCRYPTION_ALGS = [
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
]
# Default private keys OpenSSH tries when neither the policy nor ssh_config names one.
DEFAULT_KEY_NAMES = ("id_ed25519", "id_ecdsa", "id_rsa")


class AsyncsshTransport:
    """Transport over asyncssh: bounded concurrency, strict host keys, reused connections."""

    def __init__(self, policy: TransportPolicy) -> None:
        self._policy = policy
        self._config = SshConfig.load(policy.ssh_config)
        self._sem = asyncio.Semaphore(policy.concurrency)
        self._conns: dict[str, asyncio.Task[asyncssh.SSHClientConnection]] = {}
        self._keys: dict[str, asyncssh.SSHKey] = {}
        self._known: dict[tuple[str, ...], asyncssh.SSHKnownHosts] = {}
        for path in policy.client_keys:  # fail at start-up, not once per node
            self._keys[path] = _read_key(path)

    async def run(self, host: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run ``argv`` on ``host`` under a node-side ``timeout``; non-zero exit is returned."""
        validate_node(host)
        command = remote_command(argv, timeout)
        async with self._sem:
            conn = await self._connection(host)
            started = time.monotonic()
            try:
                async with asyncio.timeout(timeout + CLIENT_GRACE_S):
                    process = await conn.create_process(
                        command,
                        stdin=asyncssh.DEVNULL,  # probes never read stdin; EOF at once
                        encoding="utf-8",
                        errors="replace",  # a stray binary byte must not lose the output
                    )
                    try:
                        done = await process.wait()
                    finally:
                        process.close()
            except TimeoutError:
                raise CommandTimeout(host, argv[0], timeout) from None
            except asyncssh.ChannelOpenError as exc:
                raise TransportError(host, "failed", f"ssh channel refused: {exc.reason}") from None
            except (asyncssh.DisconnectError, OSError) as exc:
                self._forget(host)
                raise TransportError(host, "unreachable", f"connection lost: {exc}") from None
        duration = time.monotonic() - started
        if done.returncode is None:  # the channel closed without an exit status
            if conn.is_closed():
                self._forget(host)
                raise TransportError(host, "unreachable", f"connection lost during {argv[0]}")
            raise TransportError(host, "failed", f"{argv[0]}: channel closed without exit status")
        status = _exit_status(done.returncode)
        if is_remote_timeout(status, duration, timeout):
            raise CommandTimeout(host, argv[0], timeout)
        return CommandResult(
            host=host,
            argv=tuple(argv),
            exit_status=status,
            stdout=str(done.stdout or ""),
            stderr=str(done.stderr or ""),
            duration_s=duration,
        )

    def prepare(self, hosts: Sequence[str]) -> None:
        """Start the connects to ``hosts`` now, up to ``concurrency`` of them (those a run
        starts with), not waiting on them (base.Prepares): the prolog opens its connections
        while the store answers. A connect that failed by the time a run needs it is opened
        again by that run (``_connection``), whose error is then said once."""
        for host in list(hosts)[: self._policy.concurrency]:
            try:
                validate_node(host)  # a bad name is the run's error, said there
            except ConfigError:
                continue
            if host not in self._conns:
                self._conns[host] = asyncio.create_task(self._connect(host))

    async def close(self) -> None:
        """Close every connection (pending connects are cancelled)."""
        conns, self._conns = list(self._conns.values()), {}
        for task in conns:
            if not task.done():
                task.cancel()
            elif not task.cancelled() and task.exception() is None:
                task.result().close()
        for task in conns:
            if task.done() and not task.cancelled() and task.exception() is None:
                await task.result().wait_closed()

    async def _connection(self, host: str) -> asyncssh.SSHClientConnection:
        """The one connection to ``host``, opening it on first use (shared by all callers)."""
        task = self._conns.get(host)
        if task is not None and task.done() and _unusable(task):
            self._forget(host)
            task = None
        if task is None:
            task = asyncio.create_task(self._connect(host))
            self._conns[host] = task
        try:
            # shield: one caller giving up must not cancel the connect the others wait on
            return await asyncio.shield(task)
        except ScreenerError:
            if self._conns.get(host) is task:
                del self._conns[host]
            raise

    def _forget(self, host: str) -> None:
        """Drop ``host``'s cached connection so the next run reconnects."""
        task = self._conns.pop(host, None)
        if task is not None and task.done() and not _unusable(task):
            task.result().abort()

    async def _connect(self, host: str) -> asyncssh.SSHClientConnection:
        """Open and authenticate one connection, mapping failures to TransportError kinds."""
        hc = self._config.lookup(host)
        known_hosts = self._known_hosts(hc)
        try:
            return await asyncssh.connect(
                hc.hostname,
                hc.port,
                config=None,  # already resolved above; stops asyncssh re-reading ~/.ssh/config
                username=self._policy.username or hc.user or (),
                client_keys=self._client_keys(hc),
                known_hosts=known_hosts,  # strict: a key not in it is refused
                host_key_alias=hc.host_key_alias,
                agent_path=None,  # keys are given explicitly; no agent round-trips
                gss_kex=False,  # no Kerberos on compute nodes; skips GSS probing
                gss_auth=False,
                kex_algs=KEX_ALGS,
                encryption_algs=ENCRYPTION_ALGS,
                compression_algs=None,  # outputs are small; compression only costs CPU
                connect_timeout=self._policy.connect_timeout_s,  # TCP + handshake + auth
                keepalive_interval=30,  # notice a dead node during a long fio run
                keepalive_count_max=3,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise TransportError(host, "hostkey", self._hostkey_message(hc)) from None
        except asyncssh.PermissionDenied:
            user = self._policy.username or hc.user or "(local user)"
            raise TransportError(
                host, "auth", f"permission denied for user {user} (public key refused)"
            ) from None
        except asyncssh.ConnectionLost as exc:
            raise TransportError(host, "unreachable", f"connection lost: {exc}") from None
        except asyncssh.DisconnectError as exc:
            raise TransportError(host, "failed", f"ssh handshake failed: {exc}") from None
        except TimeoutError:
            raise TransportError(
                host,
                "unreachable",
                f"no SSH answer from {hc.hostname}:{hc.port} "
                f"within {self._policy.connect_timeout_s:g} s",
            ) from None
        except socket.gaierror as exc:
            raise TransportError(
                host, "unreachable", f"cannot resolve {hc.hostname}: {exc.strerror}"
            ) from None
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            raise TransportError(
                host, "unreachable", f"{hc.hostname}:{hc.port}: {why.lower()}"
            ) from None

    def _known_hosts(self, hc: HostConfig) -> asyncssh.SSHKnownHosts:
        """The known_hosts in force for ``hc``, read once per file set (missing = empty)."""
        if self._policy.known_hosts:
            paths: tuple[str, ...] = (self._policy.known_hosts,)
            if not Path(paths[0]).exists():
                raise ConfigError(f"known_hosts file {paths[0]} does not exist")
        else:
            paths = hc.known_hosts_files or (str(Path("~/.ssh/known_hosts").expanduser()),)
        known = self._known.get(paths)
        if known is None:
            existing = [p for p in paths if Path(p).exists()]
            try:
                known = asyncssh.read_known_hosts(existing) if existing else _empty_known()
            except (OSError, ValueError) as exc:
                raise ConfigError(f"cannot read known_hosts {', '.join(paths)}: {exc}") from None
            self._known[paths] = known
        return known

    def _client_keys(self, hc: HostConfig) -> list[asyncssh.SSHKey]:
        """Private keys for ``hc``: the policy's, else IdentityFile, else ~/.ssh defaults."""
        if self._policy.client_keys:
            paths = self._policy.client_keys
        elif hc.identity_files:
            paths = hc.identity_files
        else:
            home = Path("~/.ssh").expanduser()
            paths = tuple(str(home / n) for n in DEFAULT_KEY_NAMES if (home / n).is_file())
        keys = []
        for path in paths:
            key = self._keys.get(path)
            if key is None:
                if not os.path.exists(path):  # like ssh: a missing IdentityFile is skipped
                    continue
                key = self._keys[path] = _read_key(path)
            keys.append(key)
        return keys

    def _hostkey_message(self, hc: HostConfig) -> str:
        """Say whether the node's key is unknown or differs from the recorded one."""
        files = (
            self._policy.known_hosts
            or ", ".join(hc.known_hosts_files)
            or str(Path("~/.ssh/known_hosts").expanduser())
        )
        known = self._known_hosts(hc)
        name = hc.host_key_alias or hc.hostname
        try:
            addr = socket.gethostbyname(hc.hostname)
        except OSError:
            addr = hc.hostname
        recorded = known.match(name, addr, hc.port)[0]
        if recorded:
            return (
                f"host key for {hc.alias} does not match the one in known_hosts {files} "
                "(key changed or file stale; strict checking): refusing to connect"
            )
        return (
            f"host key for {hc.alias} is not in known_hosts {files} "
            "(strict checking): refusing to connect"
        )


def _unusable(task: asyncio.Task[asyncssh.SSHClientConnection]) -> bool:
    """True when a finished connect task failed or its connection has since closed."""
    if task.cancelled() or task.exception() is not None:
        return True
    return task.result().is_closed()


def _exit_status(returncode: int) -> int:
    """Shell-style exit status: 128+N for a command killed by signal N."""
    if returncode < 0:
        return 128 - returncode
    return returncode


def _read_key(path: str) -> asyncssh.SSHKey:
    """Read one unencrypted private key (ConfigError if missing or unusable)."""
    if not os.path.exists(path):
        raise ConfigError(f"client key {path} does not exist")
    try:
        return asyncssh.read_private_key(path)
    except (OSError, asyncssh.KeyImportError, ValueError) as exc:
        raise ConfigError(f"cannot use client key {path}: {exc}") from None


def _empty_known() -> asyncssh.SSHKnownHosts:
    """A known_hosts that trusts nothing (strict checking with no file)."""
    return asyncssh.import_known_hosts("")
