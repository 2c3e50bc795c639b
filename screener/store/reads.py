"""The Store's read side used by screening itself and the spool: history, fleet peers,
runs, verdicts and probes of a run, node events. (Admin views live in views.py.)"""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    func,
    select,
)

from screener.probe_data import FleetFigure, NodeProbe, Status, Trigger, Verdict
from screener.store import convert, history
from screener.store.base import StoreBase, aware
from screener.store.query_rows import (
    EventRow,
    RunRow,
    is_slow,
)
from screener.store.tables import (
    EventRecord,
    FactsRecord,
    IostatRecord,
    NodeProbeRecord,
    NodeRecord,
    ProbeJobRecord,
    RunRecord,
    VerdictRecord,
)


class StoreReads(StoreBase):
    """Queries over the results database; every read is one short transaction."""

    def read_histories(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[float]]:
        """``read_history`` for many nodes in one query (a 1,000-node sweep would otherwise
        pay 1,000 round trips); nodes without history map to []."""
        out: dict[str, list[float]] = {n: [] for n in nodes}
        if limit <= 0 or not out:
            return out
        at = None if since is None else aware(since, "since")
        ranked = history.ranked_per_node(list(out), recipe, at)
        with self.reading("read the history of many nodes") as conn:
            rows = conn.execute(
                select(ranked.c.name, ranked.c.read_mb_s)
                .where(ranked.c.rank <= limit)
                .order_by(ranked.c.name, ranked.c.rank)
            ).all()
        for name, mb_s in rows:
            out[name].append(float(mb_s) * 1e6)
        return out

    def read_tails(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[tuple[float, float]]]:
        """Each node's baseline seq-read latency tails, (p99, p99.9) in ns, newest first,
        like ``read_histories``: where a node's tail usually sits (verdict.judge: a slower
        drive model's tail is long on every read, not a fault); nodes without map to []."""
        out: dict[str, list[tuple[float, float]]] = {n: [] for n in nodes}
        if limit <= 0 or not out:
            return out
        at = None if since is None else aware(since, "since")
        with_tails = (
            VerdictRecord.read_p99_ms.is_not(None),
            VerdictRecord.read_p999_ms.is_not(None),
        )
        ranked = history.ranked_per_node(list(out), recipe, at, *with_tails)
        with self.reading("read the latency tails of many nodes") as conn:
            rows = conn.execute(
                select(ranked.c.name, ranked.c.read_p99_ms, ranked.c.read_p999_ms)
                .where(ranked.c.rank <= limit)
                .order_by(ranked.c.name, ranked.c.rank)
            ).all()
        for name, p99, p999 in rows:
            out[name].append((float(p99) * 1e6, float(p999) * 1e6))
        return out

    def read_fleet(
        self, exclude: Sequence[str], recipe: str | None, since: datetime, limit: int
    ) -> list[FleetFigure]:
        """The newest baseline figures of up to ``limit`` other nodes (same recipe, since
        ``since``): extra peers for an allocation too small to judge on its own."""
        if limit <= 0:
            return []
        query = history.fleet_query(exclude, recipe, aware(since, "since"), limit)
        with self.reading("read the fleet's recent figures") as conn:
            rows = conn.execute(query).all()
        return [
            FleetFigure(
                node=r.name,
                read_bw=float(r.read_mb_s) * 1e6,
                write_bw=None if r.write_mb_s is None else float(r.write_mb_s) * 1e6,
                rand_iops=None if r.rand_read_iops is None else float(r.rand_read_iops),
            )
            for r in rows
        ]

    def spooled_run(self, uid: str, started_at: datetime | None) -> tuple[int, str] | None:
        """(id, status) of the run whose policy carries run tag ``uid`` (screener.spool), looked
        up around ``started_at``, or among the latest 1,000 runs when that is not known."""
        query = select(RunRecord.id, RunRecord.status, RunRecord.policy)
        if started_at is not None:
            at = aware(started_at, "started_at")
            query = query.where(
                RunRecord.started_at >= at - timedelta(seconds=1),
                RunRecord.started_at <= at + timedelta(seconds=1),
            )
        else:
            query = query.order_by(RunRecord.id.desc()).limit(1000)
        with self.reading("look up a spooled run") as conn:
            rows = conn.execute(query).all()
        for run_id, status, policy in rows:
            if isinstance(policy, dict) and policy.get("run_tag") == uid:
                return int(run_id), str(status)
        return None

    def latest_runs(self, limit: int) -> list[RunRow]:
        """The newest ``limit`` runs, newest first, with their verdicts counted."""
        with self.reading("list runs") as conn:
            runs = conn.execute(
                select(RunRecord)
                .order_by(RunRecord.started_at.desc(), RunRecord.id.desc())
                .limit(max(limit, 0))
            ).all()
            counts: dict[int, dict[str, int]] = {}
            if runs:
                for run_id, status, n in conn.execute(
                    select(VerdictRecord.run_id, VerdictRecord.status, func.count())
                    .where(VerdictRecord.run_id.in_([r.id for r in runs]))
                    .group_by(VerdictRecord.run_id, VerdictRecord.status)
                ):
                    counts.setdefault(run_id, {})[status] = int(n)
        return [run_row(r, counts.get(r.id, {})) for r in runs]

    def run_verdicts(self, run_id: int) -> list[Verdict]:
        """The verdicts of one run, by node name (empty if none were recorded)."""
        with self.reading(f"read the verdicts of run {run_id}") as conn:
            rows = conn.execute(
                select(NodeRecord.name, VerdictRecord)
                .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
                .where(VerdictRecord.run_id == run_id)
                .order_by(NodeRecord.name)
            ).all()
        return [convert.verdict_from_row(r.name, r._mapping) for r in rows]

    def run_probes(self, run_id: int, round_no: int = 1) -> list[NodeProbe]:
        """The probes of one round of one run, rebuilt as NodeProbe objects, by node name."""
        with self.reading(f"read the probes of run {run_id}") as conn:
            heads = conn.execute(
                select(NodeRecord.name, NodeProbeRecord)
                .join(NodeRecord, NodeRecord.id == NodeProbeRecord.node_id)
                .where(NodeProbeRecord.run_id == run_id, NodeProbeRecord.round == round_no)
                .order_by(NodeRecord.name)
            ).all()
            ids = [h.id for h in heads]
            jobs = by_probe(conn, select(ProbeJobRecord), ProbeJobRecord.node_probe_id, ids)
            stats = by_probe(conn, select(IostatRecord), IostatRecord.node_probe_id, ids)
            facts = by_probe(conn, select(FactsRecord), FactsRecord.node_probe_id, ids)
        return [
            convert.probe_from_rows(
                h.name,
                h._mapping,
                jobs.get(h.id, []),
                stats.get(h.id, []),
                facts[h.id][0] if h.id in facts else None,
            )
            for h in heads
        ]

    def node_events(self, node: str | None = None, limit: int = 50) -> list[EventRow]:
        """Latest events, newest first, for one node or for all."""
        query = select(NodeRecord.name, EventRecord).join(
            NodeRecord, NodeRecord.id == EventRecord.node_id
        )
        if node is not None:
            query = query.where(NodeRecord.name == node)
        with self.reading("read node events") as conn:
            rows = conn.execute(
                query.order_by(EventRecord.at.desc(), EventRecord.id.desc()).limit(max(limit, 0))
            ).all()
        return [EventRow(r.name, r.at, r.action, r.reason, r.run_id, r.slurm_reason) for r in rows]


def by_probe(
    conn: Connection, query: Any, key: Any, ids: Sequence[int]
) -> dict[int, list[Mapping[Any, Any]]]:
    """Rows of a child table grouped by node_probe_id."""
    out: dict[int, list[Mapping[Any, Any]]] = {}
    if ids:
        for row in conn.execute(query.where(key.in_(ids))):
            out.setdefault(row.node_probe_id, []).append(row._mapping)
    return out


def run_row(r: Any, counts: Mapping[str, int]) -> RunRow:
    return RunRow(
        id=r.id,
        trigger=Trigger(r.trigger),
        job_id=r.job_id,
        nodeset=r.nodeset,
        node_count=r.node_count,
        started_at=r.started_at,
        finished_at=r.finished_at,
        status=r.status,
        shared_cause=bool(r.shared_cause),
        shared_cause_reason=r.shared_cause_reason,
        screener_version=r.screener_version,
        n_ok=counts.get(Status.OK.value, 0),
        n_slow=sum(n for s, n in counts.items() if is_slow(Status(s))),
        n_degraded=counts.get(Status.DEGRADED.value, 0),
        n_unknown=counts.get(Status.UNKNOWN.value, 0),
    )
