"""The composition root shared by the CLI, the hooks and the sweep: a screen is its inputs
(run.inputs), a transport (run.transports), a place for its results (run.recording) and
its event loop (run.loop); the stores for queries and for actions open here too."""

from __future__ import annotations

import dataclasses

from screener.pipeline import AfterScreen, Beside, MakeProber, ScreenRequest, ScreenResult
from screener.policy import Policy, database_url
from screener.probe_data import Trigger
from screener.run.inputs import new_run_tag, resolve_nodes, screen_policy
from screener.run.loop import run_loop
from screener.run.recording import recorded_run
from screener.run.transports import make_transport
from screener.store import Store, open_store
from screener.store.engine import describe, parse_url

__all__ = [
    "AfterScreen",
    "Beside",
    "MakeProber",
    "ScreenRequest",
    "ScreenResult",
    "make_transport",
    "open_for_actions",
    "open_results",
    "resolve_nodes",
    "run_screen",
    "screen_policy",
]


def run_screen(request: ScreenRequest) -> ScreenResult:
    """Open the store (migrating the embedded SQLite on first use), then screen
    ``request.nodes`` (ScreenRequest says what each field asks for).

    A DB that cannot be reached does not stop the screen: results go to the local spool
    (screener.spool) and are replayed on a later run. SIGTERM and SIGINT stop the probes on
    every node (by run tag), mark the run failed and raise Terminated / KeyboardInterrupt.
    A caller that already holds the store passes it (``store``, left open), or says why it
    could not open it (``db_unavailable``: spool at once, no second connect timeout).
    """
    policy = request.policy
    url = database_url(policy)
    describe(parse_url(url))  # a malformed URL is a config mistake: refuse it
    # The stored policy names the DB actually used (to_dict hides its password).
    policy = dataclasses.replace(policy, store=dataclasses.replace(policy.store, url=url))
    request = dataclasses.replace(request, policy=policy)
    tag = new_run_tag()
    with recorded_run(
        request.nodes,
        policy,
        tag,
        store=request.store,
        db_unavailable=request.db_unavailable,
        enabled=request.store_results,
        # A prolog's run replays the spool itself, after its decision and within its
        # budget (prolog.hook): a screen inside its budget must not wait on a replay.
        replay=request.trigger is not Trigger.PROLOG,
    ) as recorder:
        result = run_loop(request, tag, recorder)
    return result


def open_results(policy: Policy) -> Store:
    """The store for read-only admin queries (never migrates: an empty DB is an error)."""
    return open_store(database_url(policy), readonly=True)


def open_for_actions(policy: Policy) -> Store:
    """The store for admin commands that record what they did (`resume`): writable, and
    the embedded SQLite is created and migrated on first use, as for a screen."""
    url = database_url(policy)
    return open_store(url, upgrade=url.startswith("sqlite"))
