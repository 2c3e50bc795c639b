"""Glue between the CLI and the pipeline: build transport and store from the policy, run.

Kept apart from cli.py so that command bodies stay parse-call-print, and so the prolog and
the sweep (later) reuse exactly the same path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime

from screener import run_marker, spool
from screener.errors import ConfigError, StoreError, Terminated
from screener.hostlist import expand_nodeset, fold_nodes
from screener.pipeline import BetweenRounds, NodeDone, ProbeLocks, Prober, ScreenResult, screen
from screener.policy import Policy, TransportPolicy, database_url, validate
from screener.probe_data import Trigger
from screener.store import Store, open_store
from screener.store.engine import describe, parse_url
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


def screen_policy(
    policy: Policy,
    *,
    local: bool = False,
    target: str | None = None,
    transport: str | None = None,
    confirm: bool = True,
) -> Policy:
    """Apply command-line overrides to the configured policy (and re-validate it)."""
    probe = policy.probe if target is None else dataclasses.replace(policy.probe, target=target)
    kind = "local" if local else (transport or policy.transport.kind)
    return validate(
        dataclasses.replace(
            policy,
            probe=probe,
            transport=dataclasses.replace(policy.transport, kind=kind),
            verdict=dataclasses.replace(policy.verdict, confirm=policy.verdict.confirm and confirm),
        )
    )


def resolve_nodes(nodeset: str | None, local: bool) -> list[str]:
    """The node list to screen: this host for --local, else the expanded NodeSet."""
    if local:
        return [socket.gethostname()]
    if not nodeset:
        raise ConfigError("give a NODESET (e.g. 'node[01-08]') or --local")
    return expand_nodeset(nodeset)


def new_run_tag() -> str:
    """A run tag: time-ordered (spool files sort by it) and unique across hosts."""
    return f"{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{secrets.token_hex(6)}"


def run_screen(
    nodes: Sequence[str],
    policy: Policy,
    *,
    trigger: Trigger = Trigger.MANUAL,
    job_id: str | None = None,
    store_results: bool = True,
    on_done: NodeDone | None = None,
    between_rounds: BetweenRounds | None = None,
    deadline_s: float | None = None,
    store: Store | None = None,
    db_unavailable: str | None = None,
    after: AfterScreen | None = None,
    prober: MakeProber | None = None,
    run_info: Mapping[str, object] | None = None,
) -> ScreenResult:
    """Open the store (migrating the embedded SQLite on first use), then screen ``nodes``.

    A DB that cannot be reached does not stop the screen: results go to the local spool
    (screener.spool) and are replayed on a later run. SIGTERM and SIGINT stop the probes on
    every node (by run tag), mark the run failed and raise Terminated / KeyboardInterrupt.
    A caller that already holds the store passes it (``store``, left open), or says why it
    could not open it (``db_unavailable``: spool at once, no second connect timeout).
    """
    url = database_url(policy)
    describe(parse_url(url))  # a malformed URL is a config mistake: refuse it
    # The stored policy names the DB actually used (to_dict hides its password).
    policy = dataclasses.replace(policy, store=dataclasses.replace(policy.store, url=url))
    tag = new_run_tag()
    with recorded_run(
        nodes, policy, tag, store=store, db_unavailable=db_unavailable, enabled=store_results
    ) as recorder:
        result = _run(
            nodes,
            policy,
            tag,
            recorder,
            trigger,
            job_id,
            on_done,
            between_rounds,
            deadline_s,
            after,
            prober,
            run_info,
        )
    return result


@contextlib.contextmanager
def recorded_run(
    nodes: Sequence[str],
    policy: Policy,
    tag: str,
    *,
    store: Store | None = None,
    db_unavailable: str | None = None,
    enabled: bool = True,
) -> Iterator[spool.SpoolingStore | None]:
    """Where one run's results go (screen, prolog, sweep): the DB, opened here unless given
    (a server that does not answer means the spool), with the run's live marker; after a
    run the DB stored, earlier spooled runs are replayed. None when ``enabled`` is false."""
    url = database_url(policy)
    where = describe(parse_url(url))
    spool_dir = policy.store.spool_dir
    db: Store | None = store
    recorder: spool.SpoolingStore | None = None
    if enabled:
        reason = db_unavailable or ""
        try:
            if db is None and db_unavailable is None:
                db = open_store(url, upgrade=url.startswith("sqlite"))
        except StoreError as exc:
            if url.startswith("sqlite"):  # a local file: a path/permission mistake, not an outage
                raise
            reason = str(exc)  # a server that does not answer: spool, decide anyway

        def started(run_id: int) -> None:  # a killed run is then marked failed by the next
            run_marker.mark_live(spool_dir, tag, nodes, policy.transport.kind, run_id)

        recorder = spool.SpoolingStore(db, spool_dir, tag, reason, on_started=started, db=where)
    marker = run_marker.mark_live(spool_dir, tag, nodes, policy.transport.kind)
    try:
        yield recorder
        if db is not None and not (recorder and recorder.spooled):
            with contextlib.suppress(StoreError):  # earlier spooled runs, now the DB is back
                spool.replay(db, spool_dir, where)
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)
        if db is not None and store is None:  # ours to close; a caller's stays open
            db.close()


def _settled(result: ScreenResult, recorder: spool.SpoolingStore | None) -> ScreenResult:
    """``result`` with the recorder's outcome: the DB run id, or why the run was spooled
    (or lost) as ``store_error`` — a caller must not act on a run the DB does not hold."""
    if recorder is not None and recorder.lost is not None:
        return dataclasses.replace(result, run_id=recorder.run_id, store_error=str(recorder.lost))
    if recorder is not None and recorder.spooled:
        note = f"database unavailable ({recorder.reason}); {spool.SPOOLED_NOTE} {recorder.path}"
        return dataclasses.replace(result, run_id=recorder.run_id, store_error=note)
    return result


def _run(
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
        try:
            await _recover(transport, policy, store)
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
                )
            result = _settled(result, store)
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
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, previous)  # remove_signal_handler set SIG_DFL
            await transport.close()

    try:
        return asyncio.run(go())
    except asyncio.CancelledError:
        if terminated:
            raise Terminated(terminated[0]) from None
        raise


async def _recover(transport: Transport, policy: Policy, store: spool.SpoolingStore | None) -> None:
    """Finish the bookkeeping of screens that were killed (SIGKILL, reboot): stop what they
    left running on their nodes, mark their runs failed, then drop their live markers (a
    marker stays until its run is marked, e.g. while the database is down)."""
    spool_dir = policy.store.spool_dir
    for path, doc in run_marker.stale_runs(spool_dir):
        tag, stale_nodes = str(doc.get("uid", "")), [str(n) for n in doc.get("nodes", [])]
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLEANUP_TIMEOUT_S + 2):
                await kill_tagged(transport, stale_nodes, tag)
        db = store.store if store is not None else None
        if run_marker.finish_stale(db, doc, datetime.now(UTC)):
            path.unlink(missing_ok=True)  # kept while the DB is down: the next run finishes it


def open_results(policy: Policy) -> Store:
    """The store for read-only admin queries (never migrates: an empty DB is an error)."""
    return open_store(database_url(policy), readonly=True)


def open_for_actions(policy: Policy) -> Store:
    """The store for admin commands that record what they did (`resume`): writable, and
    the embedded SQLite is created and migrated on first use, as for a screen."""
    url = database_url(policy)
    return open_store(url, upgrade=url.startswith("sqlite"))


def make_transport(policy: TransportPolicy) -> Transport:
    """The transport ``policy.kind`` names (asyncssh by default).

    Lives here, in the composition root, so the transport package never imports its own
    implementations (no cycle between transport.base and the transports)."""
    if policy.kind == "asyncssh":
        from screener.transport.asyncssh_transport import AsyncsshTransport

        return AsyncsshTransport(policy)
    if policy.kind == "fabric":
        from screener.transport.fabric_transport import FabricTransport

        return FabricTransport(policy)
    if policy.kind == "local":
        from screener.transport.local import LocalTransport

        return LocalTransport()
    raise ConfigError(f"unknown transport kind {policy.kind!r} (asyncssh, fabric, local)")
