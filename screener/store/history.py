"""History queries: which stored figures a new verdict may compare with.

Only like with like: the same probe recipe (fingerprint stored with each probe and verdict)
and not older than an age window (a hardware refresh or a new filesystem makes old figures
another test). Only *baseline* verdicts count: OK ones, and ones absolved by a shared
cause, so that after a fleet-wide shift history catches up instead of freezing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, or_, select

from screener.probe_data import Status
from screener.store.tables import NodeRecord, VerdictRecord


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


def ranked_per_node(names: Sequence[str], recipe: str | None, since: datetime | None) -> Any:
    """Subquery: usable verdicts of ``names`` with their rank per node, newest first."""
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
            newest_first.label("rank"),
        )
        .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
        .where(NodeRecord.name.in_(list(names)), *usable(recipe, since))
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
