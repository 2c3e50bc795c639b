"""Pure parsers for ``sinfo --json`` and ``squeue --json`` across Slurm versions.

Shapes handled (captured samples in tests/data/slurm/):
- 22.05: ``{"nodes": [{"name", "state": "idle", "state_flags": ["DRAIN"], "reason": "..."}]}``;
- 23.02+ node records: ``"state": ["IDLE", "DRAIN"]`` (a list), ``reason`` possibly an object;
- 24.11 ``sinfo --json``: ``{"sinfo": [{"nodes": {"nodes": [...]}, "node": {"state": [...]},
  "reason": ..., "partition": {"name": ...}}]}``; a record groups nodes alike but for their
  reason (the first node's is printed), so it is read with ``-N``: a record per node and
  partition (a grouped record with a reason is a SlurmError);
- jobs: ``job_state`` a string or a list, ``comment`` a string or an object with ``job``;
  captured from real 24.11/26.05 in tests/data/slurm/<V>/ (tests/test_slurm_versions_parse.py).

When a node's reason was set, and by whom (``SlurmNode.reason_time``/``reason_user``):
22.05 node records have ``reason_changed_at`` (epoch seconds) and ``reason_set_by_user``;
24.11's ``sinfo --json`` records ``reason: {description, time, user}``, 26.05's ``reason:
{description, time}`` beside ``reason_set_by_user``; slurmrestd v0.0.42 ``reason_changed_at``
as ``{"set", "infinite", "number"}``; pyslurm ``reason_time`` and ``reason_user``
(pyslurm_backend.py). All are epoch seconds, read as aware UTC: no time zone is assumed.
Slurm's text output (``scontrol show node``'s ``Reason=text [user@2026-11-28T13:00:00]``,
``sinfo -R``) prints the same instant as a local time without a zone, in the zone of the
process that prints it (its TZ, else /etc/localtime): on the slurmctld host, where the hooks
run, the local time of Python there. The emulated cluster runs in UTC (the captured 24.11 and
26.05 ``sinfo_drained.json`` times are the ``scontrol_show_node_drained.txt`` stamps read as
UTC). screener reads no such text; the Slurm contract does, as Slurm's own witness
(tests/slurm_contract_driver.py ``show_node_reasons``). A node without a reason has no time
and no user, whatever Slurm prints there (24.11 says ``root`` at time 0, 26.05 ``""``).

Contract (fuzzed in tests/test_fuzz_parsers.py): whatever the text, the result is a list of
valid records or a one-line SlurmError; never another exception. Optional fields that are
missing or null take their default; a field of the wrong type is a SlurmError.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from screener.errors import ConfigError, SlurmError
from screener.hostlist import expand_nodeset, validate_node
from screener.slurm.client import SlurmJob, SlurmNode
from screener.slurm.job_id import JobKey

_STATE_SUFFIXES = "*~#!%$@^-"
# Slurm's NO_VAL and INFINITE as 32-bit times: not a time
_NOT_A_TIME = 0xFFFFFFFE
# 22.05 printed a job's state as one word, job_state_string(): the first of these flags the
# job carries, else its base state. 23.02+ print a list, base state first (["PENDING",
# "COMPLETING"]: requeued by a failed prolog, its EpilogSlurmctld still running). Read the
# 22.05 way, "PENDING" keeps meaning "requeued and done completing", which `screener release`
# waits for: taken from the list's head, it was released before Slurm's requeue reset the
# begin time, and the job waited ~2 min anyway (seen on 24.11).
_JOB_FLAGS_FIRST = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "REVOKED",
    "RESV_DEL_HOLD",
    "SIGNALING",
)


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: also ints beyond 4300 digits
        raise SlurmError(
            f"{what} did not print JSON: {one_line(str(exc) or type(exc).__name__)}"
        ) from None
    if not isinstance(data, dict):
        raise SlurmError(f"{what} printed JSON that is not an object")
    errors = data.get("errors") or []
    if not isinstance(errors, list):
        raise SlurmError(f"{what} printed 'errors' that is not a list")
    if errors:
        raise SlurmError(f"{what} reported: {one_line(_text(errors[0])) or 'an error'}")
    return data


def one_line(text: str, limit: int = 200) -> str:
    """One short line of Slurm-provided text for an error message (both backends)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _text(value: Any, depth: int = 0) -> str:
    """A string field that newer Slurm may wrap in an object (or a list)."""
    if value is None or depth > 8:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("description", "reason", "job", "error", "value", "name"):
            if isinstance(value.get(key), str):
                return str(value[key])
        return ""
    if isinstance(value, list):
        return ",".join(_text(v, depth + 1) for v in value)
    return str(value)


def _obj(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a JSON object; null is an empty one; anything else is a SlurmError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SlurmError(f"{what} is not a JSON object")
    return value


def _items(value: Any, what: str) -> list[Any]:
    """``value`` as a JSON list; null is an empty one; anything else is a SlurmError."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SlurmError(f"{what} is not a JSON list")
    return value


def node_name(value: Any, what: str) -> str:
    """A node name from Slurm output, validated (it ends up in argv and ssh host names)."""
    try:
        return validate_node(_text(value))
    except ConfigError as exc:
        raise SlurmError(f"{what}: {exc}") from None


def node_states(state: Any, flags: Any) -> frozenset[str]:
    """Base state plus flags, upper case: "idle"+["DRAIN"] and ["IDLE","DRAIN"] agree."""
    items = list(state) if isinstance(state, list) else [state]
    items += flags if isinstance(flags, list) else []
    states = (_text(s).upper().rstrip(_STATE_SUFFIXES) for s in items)
    return frozenset(s for s in states if s)  # "%" alone is a suffix of nothing: no state


def epoch_time(value: Any) -> datetime | None:
    """Epoch seconds, plain or ``{"set", "infinite", "number"}``, as an aware UTC datetime;
    None when unset (null, 0, not set), infinite, or out of range: an unknown time."""
    if isinstance(value, dict) and value.get("infinite"):
        return None
    seconds = _optional(value)
    if seconds is None or not 0 < seconds < _NOT_A_TIME:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def node_reason(rec: dict[str, Any]) -> tuple[str, datetime | None, str]:
    """(reason, when it was set, by whom) of a node record or an ``sinfo --json`` record,
    any shape above; no time and no user when there is no reason."""
    raw = rec.get("reason")
    reason = _text(raw)
    if not reason:
        return "", None, ""
    inner = raw if isinstance(raw, dict) else {}
    changed = rec.get("reason_changed_at")
    when = epoch_time(inner.get("time") if changed is None else changed)
    user = _text(rec.get("reason_set_by_user")) or _text(inner.get("user"))
    return reason, when, user


def _partitions(value: Any, what: str) -> tuple[str, ...]:
    """Partition names: a list (of names or objects) or a comma-separated string."""
    if isinstance(value, str):
        return tuple(p for p in value.split(",") if p)
    return tuple(p for p in (_text(v) for v in _items(value, what)) if p)


def parse_sinfo(text: str, what: str = "sinfo --json") -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` (any shape above; slurmrestd's /nodes is the first),
    unique by name, sorted. ``what`` names the source in errors."""
    data = _load(text, what)
    found: dict[str, SlurmNode] = {}
    if isinstance(data.get("nodes"), list):
        for raw in data["nodes"]:
            rec = _obj(raw, f"{what}: a node record")
            name = node_name(rec.get("name"), what)
            reason, when, user = node_reason(rec)
            found[name] = SlurmNode(
                name=name,
                states=node_states(rec.get("state"), rec.get("state_flags")),
                reason=reason,
                partitions=_partitions(rec.get("partitions"), f"{what}: partitions of {name}"),
                reason_time=when,
                reason_user=user,
            )
    elif isinstance(data.get("sinfo"), list):
        for raw in data["sinfo"]:
            rec = _obj(raw, f"{what}: an sinfo record")
            nodes = _obj(rec.get("nodes"), f"{what}: sinfo[].nodes")
            names = _items(nodes.get("nodes"), f"{what}: sinfo[].nodes.nodes")
            states = node_states(_obj(rec.get("node"), f"{what}: sinfo[].node").get("state"), None)
            part = _text(_obj(rec.get("partition"), f"{what}: sinfo[].partition").get("name"))
            reason, when, user = node_reason(rec)
            if reason and len(names) > 1:
                # without -N (--Node), 23.02+ group nodes whose reasons differ in one record
                # carrying the first node's reason: an admin's drain beside screener's read
                # as screener's (captured: tests/data/slurm/24.11/sinfo_two_reasons.json)
                raise SlurmError(
                    f"{what} grouped {len(names)} nodes under one reason: run it with -N"
                )
            for one in names:
                name = node_name(one, what)
                old = found.get(name)
                parts = (*old.partitions, part) if old and part else ((part,) if part else ())
                found[name] = SlurmNode(name, states, reason, parts, when, user)
    else:
        raise SlurmError(f"{what} printed neither 'nodes' nor 'sinfo'")
    return [found[n] for n in sorted(found)]


def parse_squeue_keyed(text: str, what: str = "squeue --json") -> list[tuple[JobKey, SlurmJob]]:
    """Jobs from ``squeue --json`` (or slurmrestd's /job/{id}: the same records), each with
    its array/het key (screener.slurm.job_id). ``what`` names the source in errors."""
    data = _load(text, what)
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmError(f"{what} printed no 'jobs' list")
    out: list[tuple[JobKey, SlurmJob]] = []
    for raw in jobs:
        rec = _obj(raw, f"{what}: a job record")
        unique = _number(rec.get("job_id"))
        job_id = str(unique)
        nodes = job_nodes(_text(rec.get("nodes")), f"{what}: job {job_id}")
        state = rec.get("job_state")
        het_id = _optional(rec.get("het_job_id")) or None  # 0: not a het job
        key: JobKey = (
            unique,
            _optional(rec.get("array_job_id")) or None,  # 0: not an array task
            _optional(rec.get("array_task_id")),
            het_id,
            (_optional(rec.get("het_job_offset")) or 0) if het_id else None,
        )
        out.append(
            (
                key,
                SlurmJob(
                    job_id=job_id,
                    nodes=nodes,
                    partition=_text(rec.get("partition")),
                    name=_text(rec.get("name")),
                    comment=_text(rec.get("comment")),
                    state=job_state(state),
                    reason=_text(rec.get("state_reason")),
                    restarts=_number(rec.get("restart_cnt") or 0),
                ),
            )
        )
    return out


def job_state(state: Any) -> str:
    """A job's state as one word, as 22.05 printed it (see _JOB_FLAGS_FIRST)."""
    if not isinstance(state, list):
        return _text(state)
    words = {_text(s).upper() for s in state}
    for flag in _JOB_FLAGS_FIRST:
        if flag in words:
            return flag
    return _text(state[0]) if state else ""


def job_nodes(nodelist: str, what: str) -> tuple[str, ...]:
    """A job's Slurm hostlist as validated node names (both backends); SlurmError if bad."""
    try:
        return tuple(expand_nodeset(nodelist)) if nodelist.strip() else ()
    except ConfigError as exc:
        raise SlurmError(f"{what}: {exc}") from None


def _optional(value: Any) -> int | None:
    """An optional integer field: None when null or {"set": false} (newer Slurm)."""
    if value is None or (isinstance(value, dict) and not value.get("set", True)):
        return None
    return _number(value)


def _number(value: Any) -> int:
    """An integer field, plain (22.05) or {"set": true, "number": N} (newer)."""
    if isinstance(value, dict):
        value = value.get("number", 0) if value.get("set", True) else 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SlurmError(f"expected a number in Slurm JSON, got {one_line(repr(value), 60)}")
    try:
        return int(value)
    except (ValueError, OverflowError):  # "x", nan, inf, a string of 5,000 digits
        raise SlurmError(
            f"expected a number in Slurm JSON, got {one_line(repr(value), 60)}"
        ) from None
