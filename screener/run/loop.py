"""The event loop of one screen: recover killed runs, lock the nodes, screen, settle the
result, run the caller's after-step; SIGTERM stops the probes by run tag and raises
Terminated. The step types a request carries (AfterScreen, Beside, MakeProber) are defined
with it in screener.pipeline, and re-exported by screener.app."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from screener import spool
from screener.errors import Terminated
from screener.hostlist import fold_nodes
from screener.pipeline import ScreenRequest, ScreenResult, screen
from screener.run.recording import settled
from screener.run.recovery import recover
from screener.run.transports import make_transport
from screener.store.locks import probe_locks
from screener.transport.base import RUN_TAG
from screener.transport.cleanup import CLEANUP_TIMEOUT_S, kill_tagged


def run_loop(request: ScreenRequest, tag: str, store: spool.SpoolingStore | None) -> ScreenResult:
    """The event loop of one screen, with SIGTERM turned into a clean stop: ``request`` is
    the caller's, ``tag`` the run tag every command carries, ``store`` the run's recorder."""
    nodes, policy = request.nodes, request.policy
    terminated: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)

    async def go() -> ScreenResult:
        RUN_TAG.set(tag)  # every command of this run carries the tag (copied into tasks)
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_term() -> None:
            terminated.append(signal.SIGTERM)
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        transport = make_transport(policy.transport)
        side: asyncio.Future[None] | None = None
        try:
            if request.beside is not None:
                side = asyncio.ensure_future(request.beside(transport))
            await recover(transport, policy, store)
            # issue 11: no node probed by two runs at once (store.locks)
            with probe_locks(store.store if store is not None else None) as node_locks:
                result = await screen(
                    request, transport, store, nodeset=fold_nodes(nodes), locks=node_locks
                )
            result = settled(result, store)
            if side is not None:
                await side
            if request.after is not None:
                await request.after(transport, result)
            return result
        except asyncio.CancelledError:
            # SIGTERM/SIGINT: closing the channels does not stop fio on the nodes; kill what
            # carries this run's tag, by pid, within a bounded time, then go on stopping.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(CLEANUP_TIMEOUT_S + 2):
                    await kill_tagged(transport, nodes, tag)
            raise
        finally:
            if side is not None and not side.done():  # the screen failed or was stopped
                side.cancel()
                with contextlib.suppress(BaseException):
                    await side
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, previous)  # remove_signal_handler set SIG_DFL
            await transport.close()

    try:
        return asyncio.run(go())
    except asyncio.CancelledError:
        if terminated:
            raise Terminated(terminated[0]) from None
        raise
