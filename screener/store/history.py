"""History: which stored figures a new verdict may compare with, and the queries for them.

Only like with like: the same probe recipe (fingerprint stored with each probe and verdict)
and not older than an age window (a hardware refresh or a new filesystem makes old figures
another test). Only *baseline* verdicts count: OK ones, and ones absolved by a shared
cause, so that after a fleet-wide shift history catches up instead of freezing.

``history_window`` is that rule for a policy; ``own_history`` and ``past_figures`` apply it
through any store that reads figures (``StoredFigures``: the Store, the run's spooling
store); the rest is the SQL behind ``Store.read_histories`` / ``read_fleet``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import ColumnElement, Select, func, or_, select

from screener.policy import Policy, ProbePolicy
from screener.probe.fio import recipe_fingerprint
from screener.probe_data import FleetFigure, Status
from screener.store.tables import NodeRecord, VerdictRecord
from screener.verdict.rules import MIN_HISTORY


class StoredFigures(Protocol):
    """What reading past figures needs from a store (screener.store.Store, the pipeline's
    RunStore and the spool's store satisfy it)."""

    def read_histories(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[float]]: ...

    def read_fleet(
        self, exclude: Sequence[str], recipe: str | None, since: datetime, limit: int
    ) -> list[FleetFigure]: ...


def history_window(policy: Policy, now: datetime) -> tuple[str, datetime | None]:
    """(recipe, since): which baselines count as history, like with like and not too old."""
    vp = policy.verdict
    since = now - timedelta(days=vp.history_max_age_days) if vp.history_max_age_days else None
    return recipe_fingerprint(policy.probe), since


def own_history(
    store: StoredFigures, nodes: Sequence[str], policy: Policy, now: datetime
) -> dict[str, list[float]]:
    """Each node's baseline seq-read figures: same recipe, within the age window."""
    recipe, since = history_window(policy, now)
    return store.read_histories(nodes, policy.verdict.history_runs, recipe, since)


def past_figures(
    store: StoredFigures,
    nodes: Sequence[str],
    policy: Policy,
    now: datetime,
    also: Sequence[ProbePolicy] = (),
) -> tuple[dict[str, list[float]], list[FleetFigure]]:
    """Own history (same recipe, within the age window) and the fleet's recent figures.
    With ``also`` (for the prolog's triage: the full probe), a node with too little history
    of this recipe to count (rules.MIN_HISTORY) is compared with its history of the first
    of those that has more: the seq read at the
    same block size and depth, another window (the sentinel's yardstick too). Without it, a
    triage on a fleet known only from its sweeps had no history at all."""
    vp = policy.verdict
    recipe = recipe_fingerprint(policy.probe)
    history = own_history(store, nodes, policy, now)
    for probe in also:
        if all(len(h) >= MIN_HISTORY for h in history.values()):
            break
        other = own_history(store, nodes, replace(policy, probe=probe), now)
        history = {n: _more(history.get(n, []), other.get(n, [])) for n in nodes}
    fleet: list[FleetFigure] = []
    if vp.fleet_window_h > 0 and vp.fleet_max > 0:
        window = now - timedelta(hours=vp.fleet_window_h)
        fleet = store.read_fleet(nodes, recipe, window, vp.fleet_max)
    return history, fleet


@runtime_checkable
class StoredTails(Protocol):
    """What reading past latency tails needs from a store (the Store, the spool's store)."""

    def read_tails(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[tuple[float, float]]]: ...


def past_tails(
    store: object, nodes: Sequence[str], policy: Policy, now: datetime
) -> dict[str, list[tuple[float, float]]]:
    """Each node's baseline seq-read tails (p99, p99.9 ns) of this very recipe (never
    another's: a tail is the recipe's queue depth and window), within the age window. {}
    from a store that keeps none (a test's fake)."""
    if not isinstance(store, StoredTails):
        return {}
    recipe, since = history_window(policy, now)
    return store.read_tails(nodes, policy.verdict.history_runs, recipe, since)


def _more(mine: list[float], other: list[float]) -> list[float]:
    """A node's history of this recipe, or of the other when this one has too few to count
    (rules.MIN_HISTORY) and the other has more: one triage verdict of a requeued job's
    attempt hid three sweeps' worth of full-probe history, so a slower drive model was a
    close call again (issue 44)."""
    return mine if len(mine) >= MIN_HISTORY or len(other) <= len(mine) else other


def usable(recipe: str | None, since: datetime | None) -> list[ColumnElement[bool]]:
    """WHERE terms for verdicts whose seq read may serve as history."""
    terms: list[ColumnElement[bool]] = [
        or_(VerdictRecord.baseline.is_(True), VerdictRecord.status == Status.OK.value),
        VerdictRecord.read_mb_s.is_not(None),
    ]
    if recipe is not None:
        terms.append(VerdictRecord.recipe == recipe)
    if since is not None:
        terms.append(VerdictRecord.started_at >= since)
    return terms


def ranked_per_node(
    names: Sequence[str],
    recipe: str | None,
    since: datetime | None,
    *more: ColumnElement[bool],
) -> Any:
    """Subquery: usable verdicts of ``names`` (and ``more`` terms) with their rank per
    node, newest first."""
    newest_first = func.row_number().over(
        partition_by=VerdictRecord.node_id,
        order_by=(VerdictRecord.started_at.desc(), VerdictRecord.run_id.desc()),
    )
    return (
        select(
            NodeRecord.name,
            VerdictRecord.run_id,
            VerdictRecord.read_mb_s,
            VerdictRecord.write_mb_s,
            VerdictRecord.rand_read_iops,
            VerdictRecord.read_p99_ms,
            VerdictRecord.read_p999_ms,
            newest_first.label("rank"),
        )
        .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
        .where(NodeRecord.name.in_(list(names)), *usable(recipe, since), *more)
        .subquery()
    )


def fleet_query(
    exclude: Sequence[str], recipe: str | None, since: datetime, limit: int
) -> Select[Any]:
    """The newest usable figures of each node *not* in ``exclude``, newest nodes first."""
    newest_first = func.row_number().over(
        partition_by=VerdictRecord.node_id,
        order_by=(VerdictRecord.started_at.desc(), VerdictRecord.run_id.desc()),
    )
    ranked = (
        select(
            NodeRecord.name,
            VerdictRecord.read_mb_s,
            VerdictRecord.write_mb_s,
            VerdictRecord.rand_read_iops,
            VerdictRecord.started_at,
            newest_first.label("rank"),
        )
        .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
        .where(*usable(recipe, since))
        .where(NodeRecord.name.not_in(list(exclude)))
        .subquery()
    )
    return (
        select(ranked.c.name, ranked.c.read_mb_s, ranked.c.write_mb_s, ranked.c.rand_read_iops)
        .where(ranked.c.rank == 1)
        .order_by(ranked.c.started_at.desc(), ranked.c.name)
        .limit(limit)
    )
