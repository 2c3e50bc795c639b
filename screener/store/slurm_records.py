"""Store reads/writes for the Slurm side: drain/resume events, slow episodes, fast-path and
sweep counters. Kept apart from store.py; works on any Store (SQLite or PostgreSQL)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import ColumnElement, ScalarSelect, insert, or_, select, update

from screener.errors import ConfigError
from screener.hostlist import expand_nodeset
from screener.probe_data import Status, Trigger
from screener.store import convert, history
from screener.store.base import aware, ensure_nodes
from screener.store.drain_intents import DrainIntents, PendingDrain, open_episode_in
from screener.store.tables import (
    EpisodeRecord,
    EventRecord,
    NodeProbeRecord,
    NodeRecord,
    ProbeJobRecord,
    RunRecord,
    SentinelReadingRecord,
    VerdictRecord,
)

__all__ = ["NewestFigures", "PendingDrain", "SlurmRecords"]


class NewestFigures(NamedTuple):
    """A node's newest probe round in the fleet window: its run, its seq figures
    ({"read"/"write": bytes/s}) and the recipe they were taken with."""

    run_id: int
    figures: dict[str, float]
    recipe: str | None


class SlurmRecords(DrainIntents):
    """What the prolog, epilog, sweep and `screener resume` need from the results DB."""

    # ---- episodes ----------------------------------------------------------------------
    def open_episode(
        self,
        node: str,
        trigger: Trigger,
        at: datetime,
        reason: str,
        run_id: int | None = None,
        job_id: str | None = None,
    ) -> bool:
        """Start a slow episode for ``node`` unless one is open; True when one was started."""
        name = convert.node_name(node)
        when = aware(at, "at")
        with self.store.writing(f"open a slow episode of {name}") as conn:
            node_id = ensure_nodes(conn, [name], when, touch=False)[name]
            return open_episode_in(conn, node_id, trigger, when, reason, run_id, job_id)

    def close_episodes(self, nodes: Sequence[str], at: datetime, run_id: int | None) -> list[str]:
        """End the open episode of each of ``nodes`` (they passed); returns the nodes closed."""
        names = [convert.node_name(n) for n in nodes]
        when = aware(at, "at")
        if not names:
            return []
        with self.store.writing("close slow episodes") as conn:
            rows = conn.execute(
                select(EpisodeRecord.id, NodeRecord.name)
                .join(NodeRecord, NodeRecord.id == EpisodeRecord.node_id)
                .where(NodeRecord.name.in_(names), EpisodeRecord.ended_at.is_(None))
            ).all()
            if rows:
                conn.execute(
                    update(EpisodeRecord)
                    .where(EpisodeRecord.id.in_([r.id for r in rows]))
                    .values(ended_at=when, end_run_id=run_id)
                )
        return sorted({r.name for r in rows})

    def episodes(self, node: str) -> list[tuple[str, datetime, datetime | None, str | None]]:
        """(trigger, started_at, ended_at, job_id) of the node's episodes, oldest first."""
        with self.store.reading(f"read episodes of {node}") as conn:
            rows = conn.execute(
                select(
                    EpisodeRecord.trigger,
                    EpisodeRecord.started_at,
                    EpisodeRecord.ended_at,
                    EpisodeRecord.job_id,
                )
                .join(NodeRecord, NodeRecord.id == EpisodeRecord.node_id)
                .where(NodeRecord.name == node)
                .order_by(EpisodeRecord.started_at, EpisodeRecord.id)
            ).all()
            return [(r.trigger, r.started_at, r.ended_at, r.job_id) for r in rows]

    def flaky_since(self, nodes: Sequence[str], since: datetime) -> set[str]:
        """Nodes with a slow episode open now or started/ended at or after ``since``."""
        if not nodes:
            return set()
        with self.store.reading("read recent slow episodes") as conn:
            rows = conn.execute(
                select(NodeRecord.name)
                .join(EpisodeRecord, NodeRecord.id == EpisodeRecord.node_id)
                .where(
                    NodeRecord.name.in_(list(nodes)),
                    or_(
                        EpisodeRecord.ended_at.is_(None),
                        EpisodeRecord.ended_at >= since,
                        EpisodeRecord.started_at >= since,
                    ),
                )
            ).all()
        return {r.name for r in rows}

    # ---- verdict-derived counters --------------------------------------------------------
    def last_pass(self, nodes: Sequence[str]) -> dict[str, datetime]:
        """Start time of each node's latest run when that latest verdict is OK (else absent)."""
        return {
            n: at for n, (st, at) in self.latest_verdicts(nodes).items() if st == Status.OK.value
        }

    def latest_verdicts(
        self, nodes: Sequence[str], exclude_recipe: str | None = None
    ) -> dict[str, tuple[str, datetime]]:
        """(status, run start) of each node's latest verdict, not counting verdicts of
        ``exclude_recipe`` (e.g. the prolog's triage); nodes never judged are absent."""
        every, other = self.latest_verdicts_apart(nodes, exclude_recipe)
        return every if exclude_recipe is None else other

    def latest_verdicts_apart(
        self, nodes: Sequence[str], recipe: str | None
    ) -> tuple[dict[str, tuple[str, datetime]], dict[str, tuple[str, datetime]]]:
        """Each node's latest verdict of any recipe, and its latest not of ``recipe``.

        Each answer is a newest-first walk of the (node, start, run) index that stops at its
        first row, so the prolog's read stays short however long a node's history is
        (bench/prolog_reads.py). Ties on the start go to the later run."""
        every: dict[str, tuple[str, datetime]] = {}
        other: dict[str, tuple[str, datetime]] = {}
        if not nodes:
            return every, other

        def newest(*where: ColumnElement[bool]) -> ScalarSelect[int]:
            return (
                select(VerdictRecord.id)
                .where(VerdictRecord.node_id == NodeRecord.id, *where)
                .order_by(VerdictRecord.started_at.desc(), VerdictRecord.run_id.desc())
                .limit(1)
                .correlate(NodeRecord)
                .scalar_subquery()
            )

        columns = [NodeRecord.name, newest().label("every")]
        if recipe is not None:  # else the second answer is the first: not asked twice
            not_mine = or_(VerdictRecord.recipe.is_(None), VerdictRecord.recipe != recipe)
            columns.append(newest(not_mine).label("other"))
        query = select(*columns).where(NodeRecord.name.in_(list(nodes)))
        found: dict[int, tuple[str, datetime]] = {}
        with self.store.reading("read the latest verdicts") as conn:
            pairs = conn.execute(query).all()
            wanted = {i for r in pairs for i in r[1:] if i is not None}
            if wanted:
                rows = conn.execute(
                    select(VerdictRecord.id, VerdictRecord.status, VerdictRecord.started_at).where(
                        VerdictRecord.id.in_(wanted)
                    )
                )
                found = {v.id: (v.status, v.started_at) for v in rows}
        for r in pairs:
            if r.every is not None:
                every[r.name] = found[r.every]
            latest_other = r.other if recipe is not None else r.every
            if latest_other is not None:
                other[r.name] = found[latest_other]
        return every, other

    def record_fast_path(
        self,
        passed: dict[str, datetime],
        job_id: str,
        at: datetime,
        fresh_s: float,
        notes: Mapping[str, str] | None = None,
    ) -> None:
        """One ``fast_path`` event per node the prolog let join ``job_id`` unprobed (it
        passed at ``passed[node]``; ``notes[node]``, its sentinel's figure), in one
        transaction: `accuracy` counts them as OK."""
        if not passed:
            return
        when = aware(at, "at")
        with self.store.writing(f"record the fast path of job {job_id}") as conn:
            ids = ensure_nodes(conn, list(passed), when, touch=False)
            conn.execute(
                insert(EventRecord),
                [
                    {
                        "node_id": ids[convert.node_name(n)],
                        "at": when,
                        "action": "fast_path",
                        "reason": f"passed at {aware(t, 'passed').isoformat(timespec='seconds')}"
                        f" (within prolog.fresh_s = {fresh_s:g} s)"
                        + (f"; {notes[n]}" if notes and n in notes else "")
                        + ": not probed",
                        "job_id": job_id,
                    }
                    for n, t in passed.items()
                ],
            )

    # ---- the dd sentinel's own readings (issue 22) ---------------------------------------
    def record_sentinel_readings(
        self, readings: Mapping[str, float], recipe: str, at: datetime
    ) -> None:
        """Each node's dd sentinel figure (bytes/s), in one transaction."""
        if not readings:
            return
        when = aware(at, "at")
        with self.store.writing("record dd sentinel readings") as conn:
            ids = ensure_nodes(conn, list(readings), when, touch=False)
            conn.execute(
                insert(SentinelReadingRecord),
                [
                    {"node_id": ids[convert.node_name(n)], "at": when, "recipe": recipe,
                     "read_bw": float(bw)}
                    for n, bw in readings.items()
                ],
            )  # fmt: skip

    def sentinel_readings(
        self, nodes: Sequence[str], recipe: str, since: datetime | None, limit: int
    ) -> dict[str, list[float]]:
        """Each node's newest ``limit`` dd readings of ``recipe`` since ``since`` (newest
        first); nodes without any map to []."""
        names = [convert.node_name(n) for n in nodes]
        out: dict[str, list[float]] = {n: [] for n in names}
        if not names or limit <= 0:
            return out
        query = (
            select(NodeRecord.name, SentinelReadingRecord.read_bw)
            .join(NodeRecord, NodeRecord.id == SentinelReadingRecord.node_id)
            .where(NodeRecord.name.in_(names), SentinelReadingRecord.recipe == recipe)
            .order_by(NodeRecord.name, SentinelReadingRecord.at.desc())
        )
        if since is not None:
            query = query.where(SentinelReadingRecord.at >= aware(since, "since"))
        with self.store.reading("read dd sentinel readings") as conn:
            for name, bw in conn.execute(query):
                if len(out[name]) < limit:
                    out[name].append(float(bw))
        return out

    def sweep_passes(self, node: str, limit: int = 100) -> int:
        """Consecutive OK verdicts of ``node`` in sweep runs, newest first."""
        with self.store.reading(f"read sweep verdicts of {node}") as conn:
            statuses = conn.scalars(
                select(VerdictRecord.status)
                .join(NodeRecord, NodeRecord.id == VerdictRecord.node_id)
                .join(RunRecord, RunRecord.id == VerdictRecord.run_id)
                .where(NodeRecord.name == node, RunRecord.trigger == Trigger.SWEEP.value)
                .order_by(VerdictRecord.started_at.desc(), VerdictRecord.id.desc())
                .limit(limit)
            ).all()
        count = 0
        for s in statuses:
            if s != Status.OK.value:
                break
            count += 1
        return count

    # ---- drains and resumes ----------------------------------------------------------------
    def screener_reason(self, node: str) -> str | None:
        """The reason screener set in its latest drain of ``node``, unless it resumed since."""
        with self.store.reading(f"read drain events of {node}") as conn:
            row = conn.execute(
                select(EventRecord.action, EventRecord.slurm_reason)
                .join(NodeRecord, NodeRecord.id == EventRecord.node_id)
                .where(NodeRecord.name == node, EventRecord.action.in_(["drain", "resume"]))
                .order_by(EventRecord.at.desc(), EventRecord.id.desc())
                .limit(1)
            ).first()
        if row is None or row.action != "drain":
            return None
        return str(row.slurm_reason) if row.slurm_reason else None

    def drains_since(self, nodes: Sequence[str], since: datetime) -> set[str]:
        """Which of ``nodes`` screener drained at or after ``since``: a set, so the partition
        guard counts a node drained twice in the window (resumed while still slow) once."""
        if not nodes:
            return set()
        with self.store.reading("read recent drains") as conn:
            rows = conn.execute(
                select(NodeRecord.name)
                .join(EventRecord, NodeRecord.id == EventRecord.node_id)
                .where(
                    NodeRecord.name.in_(list(nodes)),
                    EventRecord.action == "drain",
                    EventRecord.at >= since,
                )
            ).all()
        return {r.name for r in rows}

    def newest_figures(self, nodes: Sequence[str], since: datetime) -> dict[str, NewestFigures]:
        """Each node's newest probe round in a run started at or after ``since``, finished or
        not (concurrent prologs store round 1 before they judge, so the fleet guard sees what
        they measured, hooks/fleet_guard.py), of any trigger and recipe, whatever its verdict
        (none yet, OK, SLOW or UNKNOWN); failed probes and fio jobs are left out."""
        if not nodes:
            return {}
        kinds = {"seq_read": "read", "seq_write": "write"}
        with self.store.reading("read the fleet's newest figures") as conn:
            rows = conn.execute(
                select(
                    NodeRecord.name,
                    RunRecord.id,
                    NodeProbeRecord.id.label("probe_id"),
                    NodeProbeRecord.recipe,
                    ProbeJobRecord.kind,
                    ProbeJobRecord.bw_bytes,
                )
                .join(NodeProbeRecord, NodeProbeRecord.node_id == NodeRecord.id)
                .join(RunRecord, RunRecord.id == NodeProbeRecord.run_id)
                .join(ProbeJobRecord, ProbeJobRecord.node_probe_id == NodeProbeRecord.id)
                .where(
                    NodeRecord.name.in_(list(nodes)),
                    RunRecord.started_at >= aware(since, "since"),
                    ProbeJobRecord.kind.in_(list(kinds)),
                    ProbeJobRecord.error == 0,
                    NodeProbeRecord.error.is_(None),
                )
                .order_by(
                    NodeRecord.name,
                    RunRecord.started_at.desc(),
                    RunRecord.id.desc(),
                    NodeProbeRecord.round.desc(),
                )
            ).all()
        out: dict[str, NewestFigures] = {}
        chosen: dict[str, int] = {}  # node -> the probe (round) its figures come from
        for r in rows:
            if chosen.setdefault(r.name, r.probe_id) != r.probe_id:
                continue  # an older round or run of a node already placed
            placed = out.setdefault(r.name, NewestFigures(int(r.id), {}, r.recipe))
            placed.figures[kinds[r.kind]] = float(r.bw_bytes)
        return out

    def usual_figures(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None,
        since: datetime | None,
        skip_runs: Mapping[str, int],
    ) -> dict[str, dict[str, list[float]]]:
        """ "read"/"write" -> node -> its newest ``limit`` baseline figures (bytes/s; same
        recipe, since ``since``), leaving out the run ``skip_runs[node]``: the figure being
        judged is never part of its own usual level."""
        out: dict[str, dict[str, list[float]]] = {"read": {}, "write": {}}
        if limit <= 0 or not nodes:
            return out
        at = None if since is None else aware(since, "since")
        ranked = history.ranked_per_node(list(nodes), recipe, at)
        with self.store.reading("read the fleet's usual figures") as conn:
            rows = conn.execute(
                select(ranked.c.name, ranked.c.run_id, ranked.c.read_mb_s, ranked.c.write_mb_s)
                .where(ranked.c.rank <= limit + 1)
                .order_by(ranked.c.name, ranked.c.rank)
            ).all()
        for r in rows:
            if r.run_id == skip_runs.get(r.name):
                continue
            reads = out["read"].setdefault(r.name, [])
            if len(reads) >= limit:
                continue
            reads.append(float(r.read_mb_s) * 1e6)
            if r.write_mb_s is not None:
                out["write"].setdefault(r.name, []).append(float(r.write_mb_s) * 1e6)
        return out

    def unprobed_in_flight(
        self, nodes: Sequence[str], since: datetime, exclude_run: int | None
    ) -> set[str]:
        """Which of ``nodes`` a run still in progress (started at or after ``since``, not
        ``exclude_run``) covers but has not stored a probe round of yet: concurrent prologs
        whose first figures the fleet guard should wait for."""
        wanted = set(nodes)
        if not wanted:
            return set()
        with self.store.reading("read the runs in progress") as conn:
            runs = conn.execute(
                select(RunRecord.id, RunRecord.nodeset).where(
                    RunRecord.status == "running",
                    RunRecord.started_at >= aware(since, "since"),
                    RunRecord.id != (exclude_run if exclude_run is not None else -1),
                )
            ).all()
            if not runs:
                return set()
            probed = conn.execute(
                select(NodeProbeRecord.run_id, NodeRecord.name)
                .join(NodeRecord, NodeRecord.id == NodeProbeRecord.node_id)
                .where(NodeProbeRecord.run_id.in_([r.id for r in runs]))
            ).all()
        done = {(r.run_id, r.name) for r in probed}
        out: set[str] = set()
        for r in runs:
            try:
                covered = expand_nodeset(r.nodeset)
            except ConfigError:
                continue  # a nodeset this version cannot read: no wait for it
            out |= {n for n in covered if n in wanted and (r.id, n) not in done}
        return out

    def set_guard_reason(self, run_id: int, reason: str) -> None:
        """Mark a run whose drains the mass-drain guard stopped."""
        with self.store.writing(f"record the guard of run {run_id}") as conn:
            conn.execute(
                update(RunRecord).where(RunRecord.id == run_id).values(guard_reason=reason[:500])
            )
