"""The Store: record runs, probes, verdicts and node events; answer the history questions.

Each write is one short transaction (a probe is all stored or not at all); every database
failure surfaces as one StoreError line. Reads return frozen dataclasses from rows.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import (
    Connection,
    CursorResult,
    Engine,
    Text,
    any_,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from screener.errors import StoreError
from screener.model import FleetFigure, NodeProbe, RunSummary, Status, Trigger, Verdict
from screener.store import convert, history
from screener.store.engine import (
    describe,
    first_line,
    make_engine,
    screener_version,
    sqlite_path,
    translated,
)
from screener.store.models import (
    EVENT_ACTIONS,
    RUN_STATUSES,
    EventRecord,
    FactsRecord,
    IostatRecord,
    NodeProbeRecord,
    NodeRecord,
    ProbeJobRecord,
    RunRecord,
    VerdictRecord,
)
from screener.store.revision import check_current, schema_head, stamped_revision
from screener.store.rows import (
    EventRow,
    NodeHistoryRow,
    RunRow,
    is_slow,
)

JOB_ID_MAX = 64  # runs.job_id; Slurm ids such as "123456_7" or "4242+1" are far shorter


def _aware(value: datetime, what: str) -> datetime:
    """Refuse naive datetimes: the store is UTC throughout and must not guess a zone."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise StoreError(f"{what} must be a timezone-aware datetime, got {value.isoformat()}")
    return value


def _positive(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StoreError(f"{what} must be a positive integer, got {value!r}")
    return value


class Store:
    """Results database over an SQLAlchemy Engine (SQLite or PostgreSQL, migrated to head)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.where = describe(engine.url)  # for messages: file path or host:port/db

    def close(self) -> None:
        """Release pooled connections."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _write(self, doing: str) -> Iterator[Connection]:
        """One transaction (SQLite: BEGIN IMMEDIATE); commit on success, else roll back."""
        with translated(doing), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self, doing: str) -> Iterator[Connection]:
        """A read-only transaction that does not take SQLite's write lock."""
        with translated(doing), self.engine.connect() as conn:
            conn.execution_options(sqlite_begin="DEFERRED")
            with conn.begin():
                yield conn

    # ---- writes -------------------------------------------------------------------------

    def start_run(
        self,
        trigger: Trigger,
        nodes: Sequence[str],
        policy: Mapping[str, Any],
        job_id: str | None,
        nodeset: str,
        started_at: datetime,
    ) -> int:
        """Open a run (status "running") over ``nodes``; returns its id."""
        try:
            trig = Trigger(trigger)
        except ValueError:
            raise StoreError(f"unknown trigger {trigger!r}") from None
        names = [convert.node_name(n) for n in nodes]
        at = _aware(started_at, "started_at")
        if job_id is not None and not 0 < len(job_id) <= JOB_ID_MAX:
            raise StoreError(f"job id must be 1..{JOB_ID_MAX} characters, got {job_id!r}")
        with self._write("start a run") as conn:
            _ensure_nodes(conn, names, at, touch=True)
            result = conn.execute(
                insert(RunRecord).values(
                    trigger=trig.value,
                    job_id=job_id,
                    nodeset=nodeset,
                    node_count=len(set(names)),
                    policy=dict(policy),
                    started_at=at,
                    status="running",
                    shared_cause=False,
                    shared_cause_reason="",
                    screener_version=screener_version(),
                )
            )
            return _new_id(result)

    def record_probe(self, run_id: int, probe: NodeProbe, round: int) -> None:
        """Store one node's probe round: fio jobs, iostat samples, facts, raw output, error."""
        name = convert.node_name(probe.node)
        _positive(round, "round")
        head = convert.probe_row(probe)
        jobs = convert.job_rows(probe)
        samples = convert.iostat_rows(probe)
        facts = None if probe.facts is None else convert.facts_row(probe.facts)
        with self._write(f"record the probe of {name} (run {run_id}, round {round})") as conn:
            started = _run_started(conn, run_id)
            node_id = _ensure_nodes(conn, [name], started, touch=True)[name]
            probe_id = _new_id(
                conn.execute(
                    insert(NodeProbeRecord).values(
                        run_id=run_id, node_id=node_id, round=round, **head
                    )
                )
            )
            for table, rows in ((ProbeJobRecord, jobs), (IostatRecord, samples)):
                if rows:  # one executemany per table, not one round trip per row
                    conn.execute(insert(table), [{"node_probe_id": probe_id, **r} for r in rows])
            if facts is not None:
                conn.execute(insert(FactsRecord).values(node_probe_id=probe_id, **facts))

    def record_verdicts(self, run_id: int, summary: RunSummary) -> None:
        """Store the final verdict of every node and the run's fleet-level flags."""
        names = [convert.node_name(v.node) for v in summary.verdicts]
        rows = [convert.verdict_row(v) for v in summary.verdicts]
        with self._write(f"record the verdicts of run {run_id}") as conn:
            started = _run_started(conn, run_id)
            done = conn.execute(select(VerdictRecord.id).where(VerdictRecord.run_id == run_id))
            if done.first() is not None:
                raise StoreError(f"verdicts of run {run_id} are already recorded")
            ids = _ensure_nodes(conn, names, started, touch=True)
            if rows:
                conn.execute(
                    insert(VerdictRecord),
                    [
                        {"run_id": run_id, "node_id": ids[n], "started_at": started, **r}
                        for n, r in zip(names, rows, strict=True)
                    ],
                )
            conn.execute(
                update(RunRecord)
                .where(RunRecord.id == run_id)
                .values(
                    shared_cause=summary.shared_cause,
                    shared_cause_reason=summary.shared_cause_reason,
                    peer_read_median_mb_s=convert.figure(summary.peer_read_median_mb_s),
                    peer_rand_median_iops=convert.figure(summary.peer_rand_median_iops),
                )
            )

    def finish_run(self, run_id: int, finished_at: datetime, status: str = "done") -> None:
        """Close a run with its final status (done or failed)."""
        if status not in RUN_STATUSES:
            raise StoreError(f"run status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        at = _aware(finished_at, "finished_at")
        with self._write(f"finish run {run_id}") as conn:
            result = conn.execute(
                update(RunRecord)
                .where(RunRecord.id == run_id)
                .values(finished_at=at, status=status)
            )
            if result.rowcount == 0:
                raise StoreError(f"run {run_id} does not exist")

    def record_event(
        self,
        node: str,
        action: str,
        reason: str,
        at: datetime,
        run_id: int | None = None,
        slurm_reason: str | None = None,
    ) -> None:
        """Log a drain, resume, or flaky-episode boundary for ``node``."""
        name = convert.node_name(node)
        if action not in EVENT_ACTIONS:
            raise StoreError(f"event action must be one of {', '.join(EVENT_ACTIONS)}")
        when = _aware(at, "at")
        with self._write(f"record the {action} event of {name}") as conn:
            if run_id is not None:
                _run_started(conn, run_id)
            node_id = _ensure_nodes(conn, [name], when, touch=False)[name]
            conn.execute(
                insert(EventRecord).values(
                    node_id=node_id,
                    at=when,
                    action=action,
                    reason=reason,
                    run_id=run_id,
                    slurm_reason=slurm_reason,
                )
            )

    # ---- reads --------------------------------------------------------------------------

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
        at = None if since is None else _aware(since, "since")
        ranked = history.ranked_per_node(list(out), recipe, at)
        with self._read("read the history of many nodes") as conn:
            rows = conn.execute(
                select(ranked.c.name, ranked.c.read_mb_s)
                .where(ranked.c.rank <= limit)
                .order_by(ranked.c.name, ranked.c.rank)
            ).all()
        for name, mb_s in rows:
            out[name].append(float(mb_s) * 1e6)
        return out

    def read_fleet(
        self, exclude: Sequence[str], recipe: str | None, since: datetime, limit: int
    ) -> list[FleetFigure]:
        """The newest baseline figures of up to ``limit`` other nodes (same recipe, since
        ``since``): extra peers for an allocation too small to judge on its own."""
        if limit <= 0:
            return []
        query = history.fleet_query(exclude, recipe, _aware(since, "since"), limit)
        with self._read("read the fleet's recent figures") as conn:
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
            at = _aware(started_at, "started_at")
            query = query.where(
                RunRecord.started_at >= at - timedelta(seconds=1),
                RunRecord.started_at <= at + timedelta(seconds=1),
            )
        else:
            query = query.order_by(RunRecord.id.desc()).limit(1000)
        with self._read("look up a spooled run") as conn:
            rows = conn.execute(query).all()
        for run_id, status, policy in rows:
            if isinstance(policy, dict) and policy.get("run_tag") == uid:
                return int(run_id), str(status)
        return None

    def latest_runs(self, limit: int) -> list[RunRow]:
        """The newest ``limit`` runs, newest first, with their verdicts counted."""
        with self._read("list runs") as conn:
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
        return [_run_row(r, counts.get(r.id, {})) for r in runs]

    def run_verdicts(self, run_id: int) -> list[Verdict]:
        """The verdicts of one run, by node name (empty if none were recorded)."""
        with self._read(f"read the verdicts of run {run_id}") as conn:
            rows = conn.execute(
                select(NodeRecord.name, VerdictRecord)
                .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
                .where(VerdictRecord.run_id == run_id)
                .order_by(NodeRecord.name)
            ).all()
        return [convert.verdict_from_row(r.name, r._mapping) for r in rows]

    def run_probes(self, run_id: int, round: int = 1) -> list[NodeProbe]:
        """The probes of one round of one run, rebuilt as NodeProbe objects, by node name."""
        with self._read(f"read the probes of run {run_id}") as conn:
            heads = conn.execute(
                select(NodeRecord.name, NodeProbeRecord)
                .join(NodeRecord, NodeRecord.id == NodeProbeRecord.node_id)
                .where(NodeProbeRecord.run_id == run_id, NodeProbeRecord.round == round)
                .order_by(NodeRecord.name)
            ).all()
            ids = [h.id for h in heads]
            jobs = _by_probe(conn, select(ProbeJobRecord), ProbeJobRecord.node_probe_id, ids)
            stats = _by_probe(conn, select(IostatRecord), IostatRecord.node_probe_id, ids)
            facts = _by_probe(conn, select(FactsRecord), FactsRecord.node_probe_id, ids)
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

    def node_history(self, node: str, limit: int) -> list[NodeHistoryRow]:
        """The node's verdicts in its latest ``limit`` runs, newest first."""
        with self._read(f"read the history of {node}") as conn:
            rows = conn.execute(
                select(VerdictRecord, RunRecord.trigger, RunRecord.job_id)
                .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
                .join(RunRecord, RunRecord.id == VerdictRecord.run_id)
                .where(NodeRecord.name == node)
                .order_by(VerdictRecord.started_at.desc(), VerdictRecord.run_id.desc())
                .limit(max(limit, 0))
            ).all()
        return [
            NodeHistoryRow(
                run_id=r.run_id,
                started_at=r.started_at,
                trigger=Trigger(r.trigger),
                job_id=r.job_id,
                status=Status(r.status),
                reason=r.reason,
                read_mb_s=r.read_mb_s,
                write_mb_s=r.write_mb_s,
                ratio=r.ratio,
                confirmed=bool(r.confirmed),
            )
            for r in rows
        ]

    def node_events(self, node: str | None = None, limit: int = 50) -> list[EventRow]:
        """Latest events, newest first, for one node or for all."""
        query = select(NodeRecord.name, EventRecord).join(
            NodeRecord, NodeRecord.id == EventRecord.node_id
        )
        if node is not None:
            query = query.where(NodeRecord.name == node)
        with self._read("read node events") as conn:
            rows = conn.execute(
                query.order_by(EventRecord.at.desc(), EventRecord.id.desc()).limit(max(limit, 0))
            ).all()
        return [EventRow(r.name, r.at, r.action, r.reason, r.run_id, r.slurm_reason) for r in rows]


def _new_id(result: CursorResult[Any]) -> int:
    """The primary key an INSERT .. VALUES just created."""
    key = result.inserted_primary_key
    if key is None:  # cannot happen for our single-row inserts
        raise StoreError("the database did not return the new row's id")
    return int(key[0])


def _run_started(conn: Connection, run_id: int) -> datetime:
    """The run's start time; StoreError if there is no such run."""
    started = conn.scalar(select(RunRecord.started_at).where(RunRecord.id == run_id))
    if started is None:
        raise StoreError(f"run {run_id} does not exist")
    return started


def _ensure_nodes(
    conn: Connection, names: Sequence[str], seen: datetime, *, touch: bool
) -> dict[str, int]:
    """Ids of ``names``, inserting new nodes; ``touch`` moves last_seen forward to ``seen``.

    INSERT .. ON CONFLICT DO NOTHING (both backends) so concurrent runs meeting the same
    new node do not collide on the unique name.
    """
    unique = sorted(set(names))
    if not unique:
        return {}
    pg = conn.dialect.name == "postgresql"
    # PostgreSQL: one array parameter; a 10,000-name IN list costs psycopg seconds to bind
    named = (
        NodeRecord.name == any_(bindparam("names", unique, type_=postgresql.ARRAY(Text())))
        if pg
        else NodeRecord.name.in_(unique)
    )
    ids = {
        name: int(i)
        for name, i in conn.execute(select(NodeRecord.name, NodeRecord.id).where(named))
    }
    new = [n for n in unique if n not in ids]  # a sweep of a known fleet inserts nothing
    if new:
        conn.execute(
            (postgresql if pg else sqlite)
            .insert(NodeRecord)
            .on_conflict_do_nothing(index_elements=["name"]),
            [{"name": n, "first_seen": seen, "last_seen": seen} for n in new],
        )
        new_named = NodeRecord.name.in_(new)
        ids |= {
            n: int(i)
            for n, i in conn.execute(select(NodeRecord.name, NodeRecord.id).where(new_named))
        }
    if touch:
        conn.execute(
            update(NodeRecord).where(named, NodeRecord.last_seen < seen).values(last_seen=seen)
        )
    return ids


def _by_probe(
    conn: Connection, query: Any, key: Any, ids: Sequence[int]
) -> dict[int, list[Mapping[Any, Any]]]:
    """Rows of a child table grouped by node_probe_id."""
    out: dict[int, list[Mapping[Any, Any]]] = {}
    if ids:
        for row in conn.execute(query.where(key.in_(ids))):
            out.setdefault(row.node_probe_id, []).append(row._mapping)
    return out


def _run_row(r: Any, counts: Mapping[str, int]) -> RunRow:
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


def open_store(url: str, *, upgrade: bool = False, readonly: bool = False) -> Store:
    """A Store for ``url``; with ``upgrade`` first migrate to head (creating an SQLite file
    and its directory), else refuse a database that is not at head. ``readonly`` (queries)
    opens an SQLite file without ever changing it."""
    engine = make_engine(url, create_dir=upgrade, readonly=readonly and not upgrade)
    try:
        if upgrade and _revision(engine) != schema_head():
            from screener.store.migrate import upgrade_engine  # Alembic only when needed

            upgrade_engine(engine)
        _check_ready(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine)


@contextmanager
def _connected(engine: Engine) -> Iterator[Connection]:
    """A connection; failing to get one is 'cannot connect to/open database at X: why'."""
    path = sqlite_path(engine.url)
    verb = "open" if path is not None else "connect to"
    try:
        with engine.connect() as conn:
            yield conn
    except SQLAlchemyError as exc:
        where = describe(engine.url)
        raise StoreError(f"cannot {verb} database at {where}: {first_line(exc)}") from exc


def _revision(engine: Engine) -> str | None:
    """The stamped revision, None for a database (or SQLite file) that does not exist yet."""
    path = sqlite_path(engine.url)
    if path is not None and not path.exists():
        return None
    with _connected(engine) as conn:
        return stamped_revision(conn)


def _check_ready(engine: Engine) -> None:
    """Connect once and compare the schema revision with head."""
    where = describe(engine.url)
    path = sqlite_path(engine.url)
    if path is not None and not path.exists():  # do not leave an empty file behind
        raise StoreError(f"database at {where} is not initialised: run `screener db upgrade`")
    with _connected(engine) as conn:
        check_current(conn, where)
