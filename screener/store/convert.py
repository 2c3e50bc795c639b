"""Pure mapping between the data model (screener.probe_data) and table rows (plain dicts).

Kept apart from the SQL so that "what gets stored" can be tested, and read back, exactly.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from screener.errors import StoreError
from screener.probe_data import (
    FioJobResult,
    IostatSample,
    MdStatus,
    NodeFacts,
    NodeProbe,
    SmartLog,
    Status,
    Verdict,
)
from screener.store.tables import JOB_KINDS

Row = dict[str, Any]
Stored = Mapping[Any, Any]  # a row read back (SQLAlchemy RowMapping)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(FioJobResult))
_IOSTAT_FIELDS = tuple(f.name for f in dataclasses.fields(IostatSample))
_FACT_FIELDS = tuple(f.name for f in dataclasses.fields(NodeFacts) if f.name not in ("smart", "md"))
_SMART_FIELDS = tuple(f.name for f in dataclasses.fields(SmartLog))
_VERDICT_FIGURES = (
    *("read_mb_s", "write_mb_s", "rand_read_iops", "ratio", "read_p99_ms"),
    *("z_read", "z_rand", "read_p999_ms", "rand_read_p99_ms"),
)


def node_name(name: str) -> str:
    """The name if it looks like a host name; StoreError otherwise (nothing odd gets stored)."""
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise StoreError(f"invalid node name {name!r}")
    return name


def _finite(node: str, where: str, value: float) -> float:
    """Reject NaN/inf in measured figures: SQLite would turn NaN into NULL, PostgreSQL not."""
    if not math.isfinite(value):
        raise StoreError(f"probe of {node} has a non-finite value {where}={value}")
    return value


def probe_row(probe: NodeProbe) -> Row:
    """The ``node_probes`` columns of a probe (without run, node and round)."""
    return {
        "fio_version": probe.fio_version,
        "error": probe.error,
        "error_kind": probe.error_kind,
        "duration_s": _finite(probe.node, "duration_s", probe.duration_s),
        "raw_fio": probe.raw_fio,
        "raw_iostat": probe.raw_iostat,
        "recipe": probe.recipe,
    }


def job_rows(probe: NodeProbe) -> list[Row]:
    """One ``probe_jobs`` row per fio job the probe holds; ``kind`` names its slot."""
    rows = []
    for kind in JOB_KINDS:
        job: FioJobResult | None = getattr(probe, kind)
        if job is None:
            continue
        row: Row = {"kind": kind}
        for name in _JOB_FIELDS:
            value = getattr(job, name)
            if isinstance(value, float):
                value = _finite(probe.node, f"{kind}.{name}", value)
            row[name] = value
        rows.append(row)
    return rows


def iostat_rows(probe: NodeProbe) -> list[Row]:
    """The probe's iostat samples in order (``seq``), ``timestamp`` stored as ``ts``."""
    rows = []
    for seq, sample in enumerate(probe.iostat):
        row: Row = {"seq": seq, "ts": sample.timestamp}
        for name in _IOSTAT_FIELDS:
            if name == "timestamp":
                continue
            value = getattr(sample, name)
            if isinstance(value, float):
                value = _finite(probe.node, f"iostat[{seq}].{name}", value)
            row[name] = value
        rows.append(row)
    return rows


def facts_row(facts: NodeFacts) -> Row:
    """NodeFacts flattened: SMART into ``smart_*`` columns, md lists into JSON columns."""
    row: Row = {name: getattr(facts, name) for name in _FACT_FIELDS}
    smart = facts.smart
    for name in _SMART_FIELDS:
        row[f"smart_{name}"] = None if smart is None else getattr(smart, name)
    md = facts.md
    for name in ("arrays", "degraded", "rebuilding"):
        row[f"md_{name}"] = None if md is None else list(getattr(md, name))
    return row


def probe_from_rows(
    node: str,
    probe: Stored,
    jobs: Iterable[Stored],
    iostat: Sequence[Stored],
    facts: Stored | None,
) -> NodeProbe:
    """Rebuild the NodeProbe that ``probe_row``/``job_rows``/... stored."""
    slots: dict[str, FioJobResult] = {
        j["kind"]: FioJobResult(**{n: j[n] for n in _JOB_FIELDS}) for j in jobs
    }
    samples = tuple(
        IostatSample(timestamp=s["ts"], **{n: s[n] for n in _IOSTAT_FIELDS if n != "timestamp"})
        for s in sorted(iostat, key=lambda s: int(s["seq"]))
    )
    return NodeProbe(
        node=node,
        seq_write=slots.get("seq_write"),
        seq_read=slots.get("seq_read"),
        rand_read=slots.get("rand_read"),
        fio_version=probe["fio_version"],
        iostat=samples,
        facts=None if facts is None else facts_from_row(facts),
        error=probe["error"],
        error_kind=probe["error_kind"],
        duration_s=probe["duration_s"],
        raw_fio=probe["raw_fio"],
        raw_iostat=probe["raw_iostat"],
        recipe=probe.get("recipe"),
    )


def facts_from_row(row: Stored) -> NodeFacts:
    """Inverse of ``facts_row``."""
    smart = None
    if row["smart_critical_warning"] is not None:
        smart = SmartLog(**{n: row[f"smart_{n}"] for n in _SMART_FIELDS})
    md = None
    if row["md_arrays"] is not None:
        md = MdStatus(
            arrays=tuple(row["md_arrays"]),
            degraded=tuple(row["md_degraded"] or ()),
            rebuilding=tuple(row["md_rebuilding"] or ()),
        )
    return NodeFacts(smart=smart, md=md, **{n: row[n] for n in _FACT_FIELDS})


def figure(value: float | None) -> float | None:
    """NaN means "no figure": store NULL on both backends (inf, e.g. W/R over a zero read,
    is kept)."""
    return None if value is None or math.isnan(value) else value


def verdict_row(v: Verdict) -> Row:
    """The ``verdicts`` columns of a Verdict (without run, node and started_at)."""
    row: Row = {
        "status": Status(v.status).value,
        "reason": v.reason,
        "confirmed": v.confirmed,
        "signals": list(v.signals),
        "recipe": v.recipe,
        "baseline": v.baseline,
    }
    for name in _VERDICT_FIGURES:
        row[name] = figure(getattr(v, name))
    return row


def verdict_from_row(node: str, row: Stored) -> Verdict:
    """Inverse of ``verdict_row``."""
    return Verdict(
        node=node,
        status=Status(row["status"]),
        reason=row["reason"],
        confirmed=bool(row["confirmed"]),
        signals=tuple(row["signals"]),
        recipe=row.get("recipe"),
        baseline=bool(row.get("baseline")),
        **{n: row.get(n) for n in _VERDICT_FIGURES},
    )
