"""The event loop of one screen: recover killed runs, lock the nodes, screen, settle the
result, run the caller's after-step; SIGTERM stops the probes by run tag and raises
Terminated."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence

from screener import spool
from screener.errors import Terminated
from screener.hostlist import fold_nodes
from screener.pipeline import BetweenRounds, NodeDone, ProbeLocks, Prober, ScreenResult, screen
from screener.policy import Policy, ProbePolicy
from screener.probe_data import Trigger
from screener.run.recording import settled
from screener.run.recovery import recover
from screener.run.transports import make_transport
from screener.store.locks import probe_locks
from screener.transport.base import RUN_TAG, Transport
from screener.transport.cleanup import CLEANUP_TIMEOUT_S, kill_tagged

# Runs inside the screen's event loop once the verdicts are in, with the same transport (its
# SSH connections still open) and under the same SIGTERM handling: the prolog's drains and
# in-job iostat start.
AfterScreen = Callable[[Transport, "ScreenResult"], Awaitable[None]]
# Builds the run's prober from its transport and node locks (the sweep's Slurm step);
# None: pipeline.TransportProber.
MakeProber = Callable[[Transport, ProbeLocks | None], Prober]
# Runs beside the screen, in its event loop and over its transport, and is awaited before
# the after-step: the prolog's sentinels of a job's fresh nodes while the others are
# probed. It must not raise (its own failures are its results).
Beside = Callable[[Transport], Awaitable[None]]


def run_loop(
    nodes: Sequence[str],
    policy: Policy,
    tag: str,
    store: spool.SpoolingStore | None,
    trigger: Trigger,
    job_id: str | None,
    on_done: NodeDone | None,
    between_rounds: BetweenRounds | None,
    deadline_s: float | None,
    after: AfterScreen | None = None,
    prober: MakeProber | None = None,
    run_info: Mapping[str, object] | None = None,
    beside: Beside | None = None,
    history_also: Sequence[ProbePolicy] = (),
    earlier: Mapping[str, float] | None = None,
) -> ScreenResult:
    """The event loop of one screen, with SIGTERM turned into a clean stop."""
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
            if beside is not None:
                side = asyncio.ensure_future(beside(transport))
            await recover(transport, policy, store)
            # issue 11: no node probed by two runs at once (store.locks)
            with probe_locks(store.store if store is not None else None) as node_locks:
                result = await screen(
                    nodes,
                    policy,
                    transport,
                    store,
                    trigger=trigger,
                    job_id=job_id,
                    nodeset=fold_nodes(nodes),
                    on_done=on_done,
                    between_rounds=between_rounds,
                    deadline_s=deadline_s,
                    locks=node_locks,
                    prober=None if prober is None else prober(transport, node_locks),
                    run_info=run_info,
                    history_also=history_also,
                    earlier=earlier,
                )
            result = settled(result, store)
            if side is not None:
                await side
            if after is not None:
                await after(transport, result)
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
