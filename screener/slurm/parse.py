"""Pure parsers for ``sinfo --json`` and ``squeue --json`` across Slurm versions.

Shapes handled (captured samples in tests/data/slurm/):
- 22.05: ``{"nodes": [{"name", "state": "idle", "state_flags": ["DRAIN"], "reason": "..."}]}``;
- 23.02+ node records: ``"state": ["IDLE", "DRAIN"]`` (a list), ``reason`` possibly an object;
- 24.11 ``sinfo --json``: ``{"sinfo": [{"nodes": {"nodes": [...]}, "node": {"state": [...]},
  "reason": ..., "partition": {"name": ...}}]}``;
- jobs: ``job_state`` a string or a list, ``comment`` a string or an object with ``job``.
"""

from __future__ import annotations

import json
from typing import Any

from screener.errors import SlurmError
from screener.nodes import expand_nodeset, validate_node
from screener.slurm.model import SlurmJob, SlurmNode


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"{what} did not print JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SlurmError(f"{what} printed JSON that is not an object")
    errors = data.get("errors") or []
    if errors:
        raise SlurmError(f"{what} reported: {_text(errors[0])}")
    return data


def _text(value: Any) -> str:
    """A string field that newer Slurm may wrap in an object (or a list)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("description", "reason", "job", "error", "value", "name"):
            if isinstance(value.get(key), str):
                return str(value[key])
        return ""
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def _states(state: Any, flags: Any) -> frozenset[str]:
    """Base state plus flags, upper case: "idle"+["DRAIN"] and ["IDLE","DRAIN"] agree."""
    items = state if isinstance(state, list) else [state]
    items += flags if isinstance(flags, list) else []
    return frozenset(str(s).upper().rstrip("*~#!%$@^-") for s in items if s)


def parse_sinfo(text: str) -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` (any shape above), unique by name, sorted."""
    data = _load(text, "sinfo --json")
    found: dict[str, SlurmNode] = {}
    if isinstance(data.get("nodes"), list):
        for rec in data["nodes"]:
            name = validate_node(_text(rec.get("name")))
            parts = tuple(_text(p) for p in rec.get("partitions") or [])
            node = SlurmNode(
                name=name,
                states=_states(rec.get("state"), rec.get("state_flags")),
                reason=_text(rec.get("reason")),
                partitions=parts,
            )
            found[name] = node
    elif isinstance(data.get("sinfo"), list):
        for rec in data["sinfo"]:
            names = ((rec.get("nodes") or {}).get("nodes")) or []
            states = _states((rec.get("node") or {}).get("state"), None)
            part = _text((rec.get("partition") or {}).get("name"))
            for raw in names:
                name = validate_node(_text(raw))
                old = found.get(name)
                parts = (*old.partitions, part) if old and part else ((part,) if part else ())
                found[name] = SlurmNode(name, states, _text(rec.get("reason")), parts)
    else:
        raise SlurmError("sinfo --json printed neither 'nodes' nor 'sinfo'")
    return [found[n] for n in sorted(found)]


def parse_squeue(text: str) -> list[SlurmJob]:
    """Jobs from ``squeue --json``."""
    data = _load(text, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmError("squeue --json printed no 'jobs' list")
    out: list[SlurmJob] = []
    for rec in jobs:
        nodelist = _text(rec.get("nodes"))
        state = rec.get("job_state")
        out.append(
            SlurmJob(
                job_id=str(_number(rec.get("job_id"))),
                nodes=tuple(expand_nodeset(nodelist)) if nodelist else (),
                partition=_text(rec.get("partition")),
                name=_text(rec.get("name")),
                comment=_text(rec.get("comment")),
                state=(_text(state[0]) if isinstance(state, list) and state else _text(state)),
                reason=_text(rec.get("state_reason")),
                restarts=int(_number(rec.get("restart_cnt")) or 0),
            )
        )
    return out


def _number(value: Any) -> int:
    """An integer field, plain (22.05) or {"set": true, "number": N} (newer)."""
    if isinstance(value, dict):
        value = value.get("number", 0) if value.get("set", True) else 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SlurmError(f"expected a number in Slurm JSON, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise SlurmError(f"expected a number in Slurm JSON, got {value!r}") from None
