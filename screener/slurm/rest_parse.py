"""Pure readers of slurmrestd v0.0.42 replies (Slurm 24.11 through 26.05) for the rest backend.

A reply is JSON with ``errors``/``warnings`` lists beside its data (captured replies of both
releases in tests/data/slurm/rest/). ``/nodes/`` has the 23.02+ ``sinfo --json`` node records
and ``/job/{id}`` the ``squeue --json`` job records, so screener.slurm.parse reads them: the
rest backend maps fields onto SlurmNode/SlurmJob exactly as the CLI backend does. Warnings
are ignored (24.11 warns that ``/job/A_T`` lists the whole array); a non-empty ``errors`` is
one SlurmError line, unless its error number is one the caller expects (a job Slurm no
longer knows: 2017). Whatever the bytes, the result is data or a one-line SlurmError.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from screener.errors import SlurmError
from screener.slurm.client import SlurmJob, SlurmNode
from screener.slurm.job_id import JobRef, match_job
from screener.slurm.parse import one_line, parse_sinfo, parse_squeue_keyed

API = "/slurm/v0.0.42"
AUTH_ERROR = 1007  # SLURM_PROTOCOL_AUTHENTICATION_ERROR: slurmctld refused the JWT
INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID: "Invalid job id specified" (HTTP 404)


def reply(
    status: int, body: bytes, what: str, expected: frozenset[int] = frozenset()
) -> str | None:
    """The reply's JSON text when it reports no error; None when its only errors carry
    numbers in ``expected``; else a one-line SlurmError naming ``what`` and Slurm's words."""
    text = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        # not JSON: slurmrestd's own refusals are text/plain ("Authentication failure")
        raise SlurmError(f"{what}: HTTP {status}: {one_line(text) or 'no reply body'}") from None
    if not isinstance(data, dict):
        raise SlurmError(f"{what}: HTTP {status}: a reply that is not a JSON object")
    errors = data.get("errors") or []
    if not isinstance(errors, list):
        raise SlurmError(f"{what}: HTTP {status}: 'errors' is not a list")
    if errors:
        numbers = {e.get("error_number") for e in errors if isinstance(e, dict)}
        if expected and len(numbers) == len(errors) and numbers <= expected:
            return None
        raise SlurmError(f"{what}: {error_line(errors[0])}")
    if not 200 <= status < 300:
        raise SlurmError(f"{what}: HTTP {status} without an error: {one_line(text, 120)}")
    return text


def auth_refused(status: int, body: bytes, what: str, token_sent: bool) -> SlurmError | None:
    """A refused JWT or none, as one line that says what to do. slurmrestd refuses a request
    without one itself (HTTP 401 "Authentication failure", text/plain); a JWT it passes on,
    and slurmctld refuses a wrong or expired one ("Protocol authentication error", 1007)."""
    if status == 401:
        said = one_line(body.decode("utf-8", errors="replace"), 80) or "no reply body"
        said = f"HTTP 401: {said}"
    else:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            return None
        errors = data.get("errors") if isinstance(data, dict) else None
        if not isinstance(errors, list):
            return None
        refused = [e for e in errors if isinstance(e, dict) and e.get("error_number") == AUTH_ERROR]
        if not refused:
            return None
        said = error_line(refused[0])
    why = (
        "the JWT was refused (expired, or not signed with slurmctld's jwt_key): "
        "renew slurm.rest_token_file with `scontrol token`"
        if token_sent
        else "no JWT sent: set slurm.rest_token_file (or SLURM_JWT)"
    )
    return SlurmError(f"{what}: {said}; {why}")


def error_line(error: Any) -> str:
    """One of slurmrestd's ``errors``: "Invalid node name specified: Failure to update node
    x (2018)"; any other shape as short text."""
    if not isinstance(error, dict):
        return one_line(str(error)) or "an error"
    words = [str(error[k]) for k in ("error", "description") if error.get(k)]
    number = error.get("error_number")
    tail = f" ({number})" if isinstance(number, int) and not isinstance(number, bool) else ""
    return one_line(": ".join(words) + tail) or "an error"


def nodes_reply(text: str) -> list[SlurmNode]:
    """Every node of a ``GET /nodes/`` reply, sorted by name; ``reason_changed_at``
    (``{"set", "infinite", "number"}``) and ``reason_set_by_user`` give each reason's time and
    user (screener.slurm.parse.node_reason)."""
    return parse_sinfo(text, f"slurmrestd GET {API}/nodes/")


def job_reply(text: str | None, ref: JobRef, job_id: str) -> SlurmJob | None:
    """The record ``ref`` names in a ``GET /job/{ref.job_id}`` reply (None: Slurm does not
    know it), with the id it was asked by, as the CLI backend returns it."""
    if text is None:
        return None
    records = parse_squeue_keyed(text, f"slurmrestd GET {API}/job/{ref.job_id}")
    found = match_job(ref, records)
    return None if found is None else replace(found, job_id=job_id)


def unique_job_id(text: str | None, ref: JobRef) -> int | None:
    """The unique job id of the record ``ref`` names (an array task's or het component's own
    id: slurmrestd updates a job by that id only), or None when there is none."""
    if text is None:
        return None
    found = match_job(ref, parse_squeue_keyed(text, f"slurmrestd GET {API}/job/{ref.job_id}"))
    return None if found is None else int(found.job_id)


def ping_reply(text: str) -> str:
    """ "Slurm 24.11.5, slurmctld UP" from a ``GET /ping/`` reply; SlurmError when no
    controller is up."""
    data = json.loads(text)
    meta = _dict(data.get("meta"))
    release = str(_dict(meta.get("slurm")).get("release") or "?")
    pings = data.get("pings") if isinstance(data.get("pings"), list) else []
    up = [p for p in pings if isinstance(p, dict) and p.get("pinged") == "UP"]
    if not up:
        raise SlurmError(f"slurmrestd (Slurm {release}) reaches no slurmctld")
    return f"Slurm {release}, slurmctld {'UP' if len(up) == len(pings) else 'partly UP'}"


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (optional reply metadata)."""
    return value if isinstance(value, dict) else {}
