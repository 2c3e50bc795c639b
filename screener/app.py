"""The composition root shared by the CLI, the hooks and the sweep: a screen is its inputs
(run.inputs), a transport (run.transports), a place for its results (run.recording) and
its event loop (run.loop); the stores for queries and for actions open here too."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from screener.pipeline import BetweenRounds, NodeDone, ScreenResult
from screener.policy import Policy, ProbePolicy, database_url
from screener.probe_data import Trigger
from screener.run.inputs import new_run_tag, resolve_nodes, screen_policy
from screener.run.loop import AfterScreen, Beside, MakeProber, run_loop
from screener.run.recording import recorded_run
from screener.run.transports import make_transport
from screener.store import Store, open_store
from screener.store.engine import describe, parse_url

__all__ = [
    "AfterScreen",
    "MakeProber",
    "make_transport",
    "open_for_actions",
    "open_results",
    "resolve_nodes",
    "run_screen",
    "screen_policy",
]


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
    beside: Beside | None = None,
    history_also: Sequence[ProbePolicy] = (),
    earlier: Mapping[str, float] | None = None,
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
        result = run_loop(
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
            beside,
            history_also,
            earlier,
        )
    return result


def open_results(policy: Policy) -> Store:
    """The store for read-only admin queries (never migrates: an empty DB is an error)."""
    return open_store(database_url(policy), readonly=True)


def open_for_actions(policy: Policy) -> Store:
    """The store for admin commands that record what they did (`resume`): writable, and
    the embedded SQLite is created and migrated on first use, as for a screen."""
    url = database_url(policy)
    return open_store(url, upgrade=url.startswith("sqlite"))
