"""asyncssh and Fabric transports against real sshd nodes (no ssh mocks).

Runs against the emulated cluster (``cluster`` fixture, tests/conftest.py): each node is its
own sshd in its own UTS namespace. Every test runs for both transports.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from deploy.minicluster import ClusterHandle
from screener.app import make_transport
from screener.errors import CommandTimeout, ConfigError, TransportError
from screener.policy import TransportPolicy
from screener.transport import Transport, check
from screener.transport.base import CLIENT_GRACE_S

pytestmark = pytest.mark.cluster

CONNECT_TIMEOUT_S = 2.0


def _policy(cluster: ClusterHandle, kind: str, **overrides: Any) -> TransportPolicy:
    base: dict[str, Any] = {
        "kind": kind,
        "ssh_config": str(cluster.ssh_config),
        "known_hosts": str(cluster.known_hosts),
        "connect_timeout_s": CONNECT_TIMEOUT_S,
        "concurrency": 16,
    }
    return TransportPolicy(**{**base, **overrides})


@pytest.fixture(params=["asyncssh", "fabric"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def transport(cluster: ClusterHandle, kind: str) -> AsyncIterator[Transport]:
    t = make_transport(_policy(cluster, kind))
    try:
        yield t
    finally:
        await t.close()


@contextmanager
def _silent_server(
    cluster: ClusterHandle, kind: str, tmp_path: Path
) -> Iterator[tuple[socket.socket, Transport]]:
    """A server ``hung01`` that accepts TCP (kernel backlog) but never sends an SSH banner,
    like a hung node, and a transport that reaches it with a 1 s connect timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.9.250", 0))
        silent.listen(8)
        config = tmp_path / "ssh_config"
        config.write_text(
            f"Host hung01\n  HostName 127.0.9.250\n  Port {silent.getsockname()[1]}\n"
        )
        yield (
            silent,
            make_transport(_policy(cluster, kind, ssh_config=str(config), connect_timeout_s=1)),
        )


async def _expect_error(transport: Transport, host: str, argv: list[str]) -> TransportError:
    """Run and return the TransportError it must raise (closing the transport after)."""
    try:
        with pytest.raises(TransportError) as info:
            await transport.run(host, argv, timeout=10)
    finally:
        await transport.close()
    return info.value


async def test_each_node_reports_its_own_hostname(
    transport: Transport, cluster: ClusterHandle
) -> None:
    names = list(cluster.nodes)
    results = await asyncio.gather(*(transport.run(n, ["hostname"], timeout=10) for n in names))
    assert [r.stdout.strip() for r in results] == names
    assert all(r.exit_status == 0 and r.host == n for r, n in zip(results, names, strict=True))


async def test_one_connection_per_node_is_reused(
    transport: Transport, cluster: ClusterHandle
) -> None:
    first, second = cluster.nodes[0], cluster.nodes[1]
    env = ["printenv", "SSH_CONNECTION"]  # "client_ip client_port server_ip server_port"
    concurrent = await asyncio.gather(*(transport.run(first, env, timeout=10) for _ in range(3)))
    later = await transport.run(first, env, timeout=10)
    other = await transport.run(second, env, timeout=10)
    seen = {r.stdout for r in [*concurrent, later]}
    assert len(seen) == 1, seen  # the same TCP connection (same client port) every time
    assert other.stdout != later.stdout


async def test_concurrent_channels_on_one_node(
    transport: Transport, cluster: ClusterHandle
) -> None:
    # A reader blocks until a writer opens the fifo: this only completes if both commands
    # run at the same time on the node (as iostat beside fio does).
    host, fifo = cluster.nodes[0], f"/tmp/screener-fifo-{uuid.uuid4().hex}"
    check(await transport.run(host, ["mkfifo", fifo], timeout=10))
    try:
        reader = transport.run(host, ["cat", fifo], timeout=10)
        writer = transport.run(host, ["sh", "-c", 'echo rendezvous > "$1"', "sh", fifo], timeout=10)
        read, wrote = await asyncio.gather(reader, writer)
        assert (read.stdout, wrote.exit_status) == ("rendezvous\n", 0)
    finally:
        await transport.run(host, ["rm", "-f", fifo], timeout=10)


async def test_concurrency_bound_serialises(cluster: ClusterHandle, kind: str) -> None:
    # With one slot the writer cannot start while the reader waits: the reader times out.
    transport = make_transport(_policy(cluster, kind, concurrency=1))
    host, fifo = cluster.nodes[0], f"/tmp/screener-fifo-{uuid.uuid4().hex}"
    try:
        check(await transport.run(host, ["mkfifo", fifo], timeout=10))
        reader = asyncio.create_task(transport.run(host, ["cat", fifo], timeout=0.5))
        writer = asyncio.create_task(
            transport.run(host, ["sh", "-c", 'echo x > "$1"', "sh", fifo], timeout=0.5)
        )
        outcomes = await asyncio.gather(reader, writer, return_exceptions=True)
        assert all(isinstance(o, CommandTimeout) for o in outcomes), outcomes
        await transport.run(host, ["rm", "-f", fifo], timeout=10)
    finally:
        await transport.close()


async def test_argv_arrives_verbatim_and_nothing_is_executed(
    transport: Transport, cluster: ClusterHandle
) -> None:
    marker = f"/tmp/screener-pwned-{uuid.uuid4().hex}"
    args = [
        "two words",
        "it's",
        '"dq"',
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"; touch {marker}",
        f"| touch {marker}",
        "$HOME",
        "*",
        "new\nline",
        "",
        "ünïcode",
    ]
    host = cluster.nodes[0]
    result = await transport.run(host, ["printf", "%s\\n", *args], timeout=10)
    assert result.stdout == "".join(f"{a}\n" for a in args)
    probe = await transport.run(host, ["test", "-e", marker], timeout=10)
    assert probe.exit_status == 1
    assert not Path(marker).exists()


async def test_exit_status_is_returned_and_check_raises(
    transport: Transport, cluster: ClusterHandle, kind: str
) -> None:
    host = cluster.nodes[0]
    result = await transport.run(host, ["sh", "-c", "echo oops >&2; exit 3"], timeout=10)
    assert (result.exit_status, result.stderr) == (3, "oops\n")
    with pytest.raises(TransportError, match="sh exited with status 3: oops") as info:
        check(result)
    assert info.value.kind == "failed"
    killed = await transport.run(host, ["sh", "-c", "kill -9 $$"], timeout=10)
    # asyncssh reports sshd's exit-signal as 128+N; paramiko drops exit-signal (-1 -> 255,
    # as the OpenSSH client also reports).
    assert killed.exit_status == (137 if kind == "asyncssh" else 255)
    missing = await transport.run(host, ["screener-no-such-cmd"], timeout=10)
    assert missing.exit_status == 127 and "screener-no-such-cmd" in missing.stderr


async def test_command_timeout_kills_the_remote_tree(
    transport: Transport, cluster: ClusterHandle
) -> None:
    host = cluster.nodes[0]
    tag = f"3{uuid.uuid4().int % 10**6}.5"  # a sleep duration no other test uses
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as info:
        await transport.run(host, ["sh", "-c", f"sleep {tag} & sleep {tag}; wait"], timeout=1)
    elapsed = time.monotonic() - started
    assert info.value.kind == "timeout" and info.value.host == host
    assert 1 <= elapsed < 1 + CLIENT_GRACE_S + 1
    # Both sleeps ran under the node-side timeout's process group: both are gone.
    left = await transport.run(host, ["pgrep", "-f", f"^sleep {re.escape(tag)}$"], timeout=10)
    assert left.exit_status == 1, left.stdout


async def test_unreachable_node_fails_fast(cluster: ClusterHandle, kind: str) -> None:
    victim = cluster.nodes[-1]
    cluster.inject(victim, "unreachable")
    try:
        transport = make_transport(_policy(cluster, kind))
        started = time.monotonic()
        err = await _expect_error(transport, victim, ["hostname"])
        assert err.kind == "unreachable" and err.host == victim
        assert time.monotonic() - started < CONNECT_TIMEOUT_S + 1
    finally:
        cluster.heal(victim)


async def test_silent_server_is_unreachable_within_connect_timeout(
    cluster: ClusterHandle, kind: str, tmp_path: Path
) -> None:
    with _silent_server(cluster, kind, tmp_path) as (_, transport):
        started = time.monotonic()
        err = await _expect_error(transport, "hung01", ["hostname"])
    assert err.kind == "unreachable" and "hung01" in str(err)
    assert time.monotonic() - started < 1 + 1.5


async def test_unknown_host_key_is_refused(
    cluster: ClusterHandle, kind: str, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    transport = make_transport(_policy(cluster, kind, known_hosts=str(empty)))
    host = cluster.nodes[0]
    err = await _expect_error(transport, host, ["hostname"])
    assert err.kind == "hostkey"
    assert f"host key for {host} is not in known_hosts {empty}" in str(err)
    assert str(err).endswith("(strict checking): refusing to connect")


async def test_changed_host_key_is_refused(
    cluster: ClusterHandle, kind: str, tmp_path: Path
) -> None:
    host, other = cluster.nodes[0], cluster.nodes[1]
    port = cluster.ssh_port
    lines = Path(cluster.known_hosts).read_text().splitlines()
    other_key = next(ln for ln in lines if f"[{cluster.addr(other)}]:{port}" in ln).split()[1:3]
    swapped = tmp_path / "known_hosts"
    swapped.write_text(f"[{cluster.addr(host)}]:{port} {' '.join(other_key)}\n")
    transport = make_transport(_policy(cluster, kind, known_hosts=str(swapped)))
    err = await _expect_error(transport, host, ["hostname"])
    assert err.kind == "hostkey"
    assert "does not match the one in known_hosts" in str(err)


async def test_wrong_client_key_is_auth(cluster: ClusterHandle, kind: str, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    transport = make_transport(_policy(cluster, kind, client_keys=(str(stranger),)))
    err = await _expect_error(transport, cluster.nodes[0], ["hostname"])
    assert err.kind == "auth" and "permission denied" in str(err)


async def test_ssh_config_supplies_key_and_known_hosts(cluster: ClusterHandle, kind: str) -> None:
    # No keys or known_hosts in the policy: IdentityFile and UserKnownHostsFile come from
    # the cluster's ssh_config (HostName, Port and User too), as with `ssh -F`.
    policy = _policy(cluster, kind, known_hosts=None)
    assert policy.client_keys == () and policy.username is None
    transport = make_transport(policy)
    try:
        result = await transport.run(cluster.nodes[0], ["id", "-un"], timeout=10)
    finally:
        await transport.close()
    assert result.stdout == "root\n"


async def test_missing_policy_key_is_a_config_error(cluster: ClusterHandle, kind: str) -> None:
    with pytest.raises(ConfigError, match="client key /nonexistent/key does not exist"):
        make_transport(_policy(cluster, kind, client_keys=("/nonexistent/key",)))


async def test_lost_connection_is_unreachable_and_reconnects(
    transport: Transport, cluster: ClusterHandle
) -> None:
    host = cluster.nodes[0]
    waiting = asyncio.create_task(transport.run(host, ["sleep", "30"], timeout=60))
    await transport.run(host, ["true"], timeout=10)  # the connection and sleep's channel exist
    # Kill this connection's sshd session process on the node (the parent of our
    # `timeout` wrapper): every channel of the connection drops at once, as when a node dies.
    killer = 'kill -9 "$(ps -o ppid= -p "$PPID")"'
    with pytest.raises(TransportError) as lost:
        await transport.run(host, ["sh", "-c", killer], timeout=10)
    assert lost.value.kind == "unreachable"
    with pytest.raises(TransportError) as other:
        await waiting
    assert other.value.kind == "unreachable"
    again = await transport.run(host, ["hostname"], timeout=10)
    assert again.stdout.strip() == host


async def test_prepare_connects_before_any_run_and_the_run_awaits_that_connect(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    # The prolog opens its connections while the store answers (prolog/execute._open). A
    # server that accepts TCP but never speaks shows it: prepare alone makes it accept; the
    # run then waits on that connect (no second TCP connection) and says its error once,
    # within one connect timeout counted from prepare.
    from screener.transport.base import Prepares

    with _silent_server(cluster, "asyncssh", tmp_path) as (silent, transport):
        assert isinstance(transport, Prepares)
        started = time.monotonic()
        transport.prepare(["hung01", "bad name;rm"])  # a bad name is the run's error
        silent.settimeout(5)
        accepted, _ = await asyncio.get_running_loop().run_in_executor(None, silent.accept)
        with accepted:
            with pytest.raises(ConfigError, match="invalid node name"):
                await transport.run("bad name;rm", ["true"], timeout=10)
            err = await _expect_error(transport, "hung01", ["hostname"])
            silent.settimeout(0)
            with pytest.raises(BlockingIOError):
                silent.accept()  # no second connection: the run awaited the prepared one
    assert err.kind == "unreachable" and "within 1 s" in str(err)
    assert time.monotonic() - started < 1 + 1.5


async def test_prepared_connections_serve_the_runs(cluster: ClusterHandle) -> None:
    from screener.transport.asyncssh_transport import AsyncsshTransport

    transport = make_transport(_policy(cluster, "asyncssh", concurrency=2))
    assert isinstance(transport, AsyncsshTransport)
    try:
        names = list(cluster.nodes)
        transport.prepare(names)  # the first `concurrency` of them connect now
        env = ["printenv", "SSH_CONNECTION"]
        first = await asyncio.gather(*(transport.run(n, env, timeout=10) for n in names))
        again = await asyncio.gather(*(transport.run(n, env, timeout=10) for n in names))
    finally:
        await transport.close()
    assert [r.stdout for r in first] == [r.stdout for r in again]
    assert len({r.stdout for r in first}) == len(names)
