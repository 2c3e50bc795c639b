"""LocalTransport: the Transport contract on this machine, through run_command."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from screener.errors import CommandTimeout, TransportError
from screener.transport import check
from screener.transport.local import LocalTransport


async def test_runs_here_for_local_names() -> None:
    transport = LocalTransport()
    me = socket.gethostname()
    for host in ("localhost", me):
        result = await transport.run(host, ["hostname"], timeout=10)
        assert result.stdout.strip() == me and result.host == host
    await transport.close()


async def test_argv_is_not_interpreted() -> None:
    args = ["a b", "$(id)", "; echo x", "it's", ""]
    result = await LocalTransport().run("localhost", ["printf", "%s\\n", *args], timeout=10)
    assert result.stdout == "".join(f"{a}\n" for a in args)


async def test_non_zero_exit_is_returned_and_check_raises() -> None:
    result = await LocalTransport().run(
        "localhost", ["sh", "-c", "echo no >&2; exit 4"], timeout=10
    )
    assert result.exit_status == 4
    with pytest.raises(TransportError, match="status 4: no"):
        check(result)


async def test_timeout_raises_and_does_not_block_the_loop() -> None:
    transport = LocalTransport()
    started = time.monotonic()
    slow = asyncio.create_task(transport.run("localhost", ["sleep", "30"], timeout=0.5))
    quick = await transport.run("localhost", ["echo", "meanwhile"], timeout=10)
    assert quick.stdout == "meanwhile\n"
    with pytest.raises(CommandTimeout) as info:
        await slow
    assert info.value.kind == "timeout"
    assert time.monotonic() - started < 5


async def test_refuses_other_hosts() -> None:
    with pytest.raises(TransportError) as info:
        await LocalTransport().run("node01", ["hostname"], timeout=10)
    assert info.value.host == "node01" and "only runs on this host" in str(info.value)
