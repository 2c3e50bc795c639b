"""Bulk writes of a whole probe round and its verdicts (a 10,000-node sweep), one
transaction each.

``Store.record_probe`` stores one node per transaction, which is right for a prolog run
(a failure loses one node, not the run) but costs a sweep over 10,000 nodes 10,000 commits.
``record_round`` and ``record_verdicts`` write every node at once: on PostgreSQL with COPY
(probe ids reserved from the sequence first, so child rows can point at them), on SQLite
with one executemany per table. bench/fleet_scale.py measures them against a raw COPY.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, text

from screener.errors import StoreError
from screener.probe_data import NodeProbe, RunSummary
from screener.store import convert
from screener.store.base import ensure_nodes, positive, record_run_outcome, run_started
from screener.store.store import Store
from screener.store.tables import (
    FactsRecord,
    IostatRecord,
    NodeProbeRecord,
    ProbeJobRecord,
    VerdictRecord,
)

Rows = list[dict[str, Any]]
_JSON_COLUMNS = {"md_arrays", "md_degraded", "md_rebuilding", "signals"}


def record_round(store: Store, run_id: int, probes: Sequence[NodeProbe], round_no: int = 1) -> None:
    """Store every probe of one round of ``run_id`` (all or nothing)."""
    positive(round_no, "round")
    names = [convert.node_name(p.node) for p in probes]
    heads = [convert.probe_row(p) for p in probes]
    if not probes:
        return
    with store.writing(f"record {len(probes)} probes of run {run_id}") as conn:
        started = run_started(conn, run_id)
        ids = ensure_nodes(conn, names, started, touch=False)  # start_run moved last_seen
        head_rows = [
            {"run_id": run_id, "node_id": ids[n], "round": round_no, **h}
            for n, h in zip(names, heads, strict=True)
        ]
        if conn.dialect.name == "postgresql":
            probe_ids = _reserve_ids(conn, "node_probes", len(probes))
            _copy(
                conn,
                "node_probes",
                [{"id": i, **r} for i, r in zip(probe_ids, head_rows, strict=True)],
            )
        else:
            result = conn.execute(
                insert(NodeProbeRecord).returning(NodeProbeRecord.id, sort_by_parameter_order=True),
                head_rows,
            )
            probe_ids = [int(i) for i in result.scalars()]
        jobs: Rows = []
        samples: Rows = []
        facts: Rows = []
        for pid, probe in zip(probe_ids, probes, strict=True):
            jobs += [{"node_probe_id": pid, **r} for r in convert.job_rows(probe)]
            samples += [{"node_probe_id": pid, **r} for r in convert.iostat_rows(probe)]
            if probe.facts is not None:
                facts.append({"node_probe_id": pid, **convert.facts_row(probe.facts)})
        for table, rows in ((ProbeJobRecord, jobs), (IostatRecord, samples), (FactsRecord, facts)):
            _write(conn, table, rows)


def record_verdicts(store: Store, run_id: int, summary: RunSummary) -> None:
    """Store::record_verdicts for a whole fleet: the verdicts by COPY on PostgreSQL."""
    names = [convert.node_name(v.node) for v in summary.verdicts]
    rows = [convert.verdict_row(v) for v in summary.verdicts]
    with store.writing(f"record the verdicts of run {run_id}") as conn:
        started: datetime = run_started(conn, run_id)
        done = conn.execute(select(VerdictRecord.id).where(VerdictRecord.run_id == run_id))
        if done.first() is not None:
            raise StoreError(f"verdicts of run {run_id} are already recorded")
        ids = ensure_nodes(conn, names, started, touch=False)  # start_run moved last_seen
        _write(
            conn,
            VerdictRecord,
            [
                {"run_id": run_id, "node_id": ids[n], "started_at": started, **r}
                for n, r in zip(names, rows, strict=True)
            ],
        )
        record_run_outcome(conn, run_id, summary)


def _write(conn: Connection, table: Any, rows: Rows) -> None:
    """COPY on PostgreSQL, one executemany elsewhere."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        _copy(conn, table.__tablename__, rows)
    else:
        conn.execute(insert(table), rows)


def _reserve_ids(conn: Connection, table: str, n: int) -> list[int]:
    """``n`` fresh ids from the table's own sequence (what its inserts would have used)."""
    result = conn.execute(
        text("SELECT nextval(pg_get_serial_sequence(:t, 'id')) FROM generate_series(1, :n)"),
        {"t": table, "n": n},
    )
    return [int(i) for i in result.scalars()]


def _copy(conn: Connection, table: str, rows: Rows) -> None:
    """COPY ``rows`` (dicts with the same keys; table and columns are our own names) into
    ``table`` inside the connection's transaction."""
    cols = list(rows[0])
    dbapi = conn.connection.driver_connection
    assert dbapi is not None
    json_cols = [c in _JSON_COLUMNS for c in cols]
    with (
        dbapi.cursor() as cur,
        cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as copy,
    ):
        for r in rows:
            copy.write_row(
                [
                    json.dumps(r[c], allow_nan=False) if j and r[c] is not None else r[c]
                    for c, j in zip(cols, json_cols, strict=True)
                ]
            )
