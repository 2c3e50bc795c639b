"""Glue between the CLI and the pipeline: build transport and store from the policy, run.

Kept apart from cli.py so that command bodies stay parse-call-print, and so the prolog and
the sweep (later) reuse exactly the same path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from screener.errors import ConfigError
from screener.model import Trigger
from screener.nodes import expand_nodeset, fold_nodes
from screener.pipeline import BetweenRounds, NodeDone, ScreenResult, screen
from screener.policy import Policy, database_url, validate
from screener.store import Store, open_store
from screener.transport.base import make_transport


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


def run_screen(
    nodes: Sequence[str],
    policy: Policy,
    *,
    trigger: Trigger = Trigger.MANUAL,
    job_id: str | None = None,
    store_results: bool = True,
    on_done: NodeDone | None = None,
    between_rounds: BetweenRounds | None = None,
) -> ScreenResult:
    """Open the store (migrating the embedded SQLite on first use), then screen ``nodes``."""
    url = database_url(policy)
    store = open_store(url, upgrade=url.startswith("sqlite")) if store_results else None

    async def go() -> ScreenResult:
        transport = make_transport(policy.transport)
        try:
            return await screen(
                nodes,
                policy,
                transport,
                store,
                trigger=trigger,
                job_id=job_id,
                nodeset=fold_nodes(nodes),
                on_done=on_done,
                between_rounds=between_rounds,
            )
        finally:
            await transport.close()

    return asyncio.run(go())


def open_results(policy: Policy) -> Store:
    """The store for read-only admin queries (never migrates: an empty DB is an error)."""
    return open_store(database_url(policy), readonly=True)


def flaky_since(days: float) -> datetime:
    """Start of the flaky-node window: ``days`` before now, UTC."""
    if days <= 0:
        raise ConfigError("--days must be > 0")
    return datetime.now(UTC) - timedelta(days=days)
