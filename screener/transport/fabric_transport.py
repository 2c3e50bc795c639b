"""FabricTransport: the same contract over Fabric 3 / paramiko, in a bounded thread pool.

Optional (``pip install screener[fabric]``) for sites that standardised on Fabric; it costs
about 5x the client CPU of the asyncssh transport per node (5.2x in docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from screener.errors import CommandTimeout, ConfigError, TransportError
from screener.hostlist import validate_node
from screener.policy import TransportPolicy
from screener.transport.base import (
    CLIENT_GRACE_S,
    CommandResult,
    is_remote_timeout,
    remote_command,
)

_MISSING = "transport fabric needs `pip install screener[fabric]`"


class FabricTransport:
    """Transport over ``fabric.Connection``: one connection per node, strict host keys."""

    def __init__(self, policy: TransportPolicy) -> None:
        try:
            import fabric
            import invoke
            import paramiko
        except ImportError:
            raise ConfigError(_MISSING) from None
        # paramiko logs a traceback from its transport thread on every failed handshake;
        # without a handler Python prints it to stderr. We report one line per node instead
        # (records still propagate to handlers the application configures).
        logging.getLogger("paramiko").addHandler(logging.NullHandler())
        self._fabric: Any = fabric
        self._invoke: Any = invoke
        self._paramiko: Any = paramiko
        self._policy = policy
        if policy.ssh_config and not Path(policy.ssh_config).is_file():
            raise ConfigError(f"ssh config {policy.ssh_config} does not exist")
        if policy.known_hosts and not Path(policy.known_hosts).exists():
            raise ConfigError(f"known_hosts file {policy.known_hosts} does not exist")
        for key in policy.client_keys:
            if not Path(key).is_file():
                raise ConfigError(f"client key {key} does not exist")
        # One Config for all nodes: Fabric parses the ssh_config file when it is built.
        self._config: Any = fabric.Config(runtime_ssh_path=policy.ssh_config)
        self._pool = ThreadPoolExecutor(policy.concurrency, thread_name_prefix="screener-fabric")
        self._conns: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._reject = _reject_policy(paramiko)

    async def run(self, host: str, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run ``argv`` on ``host`` in a pool thread; non-zero exit is returned, not raised."""
        validate_node(host)
        command = remote_command(argv, timeout)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, self._run_sync, host, tuple(argv), command, timeout
        )

    async def close(self) -> None:
        """Close every connection and stop the thread pool."""
        with self._guard:
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            conn.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run_sync(
        self, host: str, argv: tuple[str, ...], command: str, timeout: float
    ) -> CommandResult:
        conn = self._connection(host)
        started = time.monotonic()
        try:
            result = conn.run(
                command,
                hide=True,  # capture, do not echo to our stdout
                warn=True,  # non-zero exit is a result, not an exception
                in_stream=False,  # never forward our stdin to the probe
                pty=False,  # separate stdout/stderr; no terminal on the node
                timeout=timeout + CLIENT_GRACE_S,  # node-side timeout normally fires first
            )
        except self._invoke.CommandTimedOut:
            raise CommandTimeout(host, argv[0], timeout) from None
        except self._paramiko.ChannelException as exc:
            raise TransportError(host, "failed", f"ssh channel refused: {exc}") from None
        except (self._paramiko.SSHException, EOFError, OSError) as exc:
            self._forget(host)
            raise TransportError(host, "unreachable", f"connection lost: {exc}") from None
        duration = time.monotonic() - started
        if result.exited is None or result.exited < 0:  # no exit-status from sshd
            if not conn.is_connected:
                self._forget(host)
                raise TransportError(host, "unreachable", f"connection lost during {argv[0]}")
            status = 255  # exit-signal (paramiko drops it) or no status: what ssh reports
        else:
            status = int(result.exited)
        if is_remote_timeout(status, duration, timeout):
            raise CommandTimeout(host, argv[0], timeout)
        return CommandResult(
            host=host,
            argv=argv,
            exit_status=status,
            stdout=str(result.stdout),
            stderr=str(result.stderr),
            duration_s=duration,
        )

    def _connection(self, host: str) -> Any:
        """The open connection to ``host``; the per-host lock makes concurrent callers share it."""
        with self._guard:
            lock = self._locks.setdefault(host, threading.Lock())
        with lock:
            conn = self._conns.get(host)
            if conn is not None and conn.is_connected:
                return conn
            conn = self._open(host)
            with self._guard:
                self._conns[host] = conn
            return conn

    def _forget(self, host: str) -> None:
        with self._guard:
            conn = self._conns.pop(host, None)
        if conn is not None:
            conn.close()

    def _open(self, host: str) -> Any:
        """Connect and authenticate, mapping paramiko's failures to TransportError kinds."""
        p = self._policy
        keys = list(p.client_keys)
        conn = self._fabric.Connection(
            host,  # the ssh_config alias; Fabric applies HostName, Port, User, IdentityFile
            user=p.username,  # None: ssh_config User, else the local user
            config=self._config,
            connect_timeout=p.connect_timeout_s,
            connect_kwargs={
                **({"key_filename": keys} if keys else {}),
                "allow_agent": False,  # explicit keys only, like the asyncssh transport
                "banner_timeout": p.connect_timeout_s,  # a hung sshd must not hang us
                "auth_timeout": p.connect_timeout_s,
            },
        )
        if keys:  # the policy's keys replace ssh_config IdentityFile (Fabric would merge them)
            conn.connect_kwargs["key_filename"] = keys
        # Like IdentitiesOnly: when keys are named, do not also try ~/.ssh/id_* behind them.
        conn.connect_kwargs["look_for_keys"] = not conn.connect_kwargs.get("key_filename")
        known = self._known_hosts_files(conn)
        client = conn.client
        client.set_missing_host_key_policy(self._reject)  # Fabric defaults to AutoAdd
        for path in known:
            if Path(path).exists():
                client.load_host_keys(path)
        pk = self._paramiko
        where = f"{conn.host}:{conn.port}"
        try:
            try:
                conn.open()
            except BaseException:
                conn.close()  # stop paramiko's transport thread of the failed attempt
                raise
        except _UnknownHostKeyMarker:
            raise TransportError(
                host,
                "hostkey",
                f"host key for {host} is not in known_hosts {', '.join(known)} "
                "(strict checking): refusing to connect",
            ) from None
        except pk.BadHostKeyException:
            raise TransportError(
                host,
                "hostkey",
                f"host key for {host} does not match the one in known_hosts {', '.join(known)} "
                "(key changed or file stale; strict checking): refusing to connect",
            ) from None
        except pk.AuthenticationException:
            raise TransportError(
                host, "auth", f"permission denied for user {conn.user} (public key refused)"
            ) from None
        except (TimeoutError, EOFError) as exc:
            raise TransportError(
                host, "unreachable", f"no SSH answer from {where} ({exc or 'timed out'})"
            ) from None
        except pk.SSHException as exc:
            ssh = client.get_transport()
            if ssh is None or not ssh.remote_version:  # no SSH banner ever arrived
                raise TransportError(
                    host,
                    "unreachable",
                    f"no SSH answer from {where} within {p.connect_timeout_s:g} s",
                ) from None
            raise TransportError(host, "failed", f"{where}: ssh handshake failed: {exc}") from None
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            raise TransportError(host, "unreachable", f"{where}: {why}") from None
        return conn

    def _known_hosts_files(self, conn: Any) -> list[str]:
        """The policy's known_hosts, else ssh_config UserKnownHostsFile, else ~/.ssh's."""
        if self._policy.known_hosts:
            return [self._policy.known_hosts]
        configured = conn.ssh_config.get("userknownhostsfile")
        if configured:
            return [os.path.expanduser(p) for p in str(configured).split()]
        return [os.path.expanduser("~/.ssh/known_hosts")]


class _UnknownHostKeyMarker(Exception):
    """Raised by the reject policy so an unknown key is told apart from other SSH errors."""


def _reject_policy(paramiko: Any) -> Any:
    """A paramiko RejectPolicy that raises a recognisable exception for unknown host keys."""

    class _Reject(paramiko.RejectPolicy):  # type: ignore[misc]
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise _UnknownHostKeyMarker(hostname)

    return _Reject()
