"""Which job record a Slurm job id names, the same way in both backends.

``123`` is the record whose unique job id is 123 (for an array task, the id Slurm gave that
task: what the prolog sees as SLURM_JOB_ID); ``123_4`` is task 4 of array 123; ``123+1`` is
component 1 of het job 123. An array task still pending inside its array's one record has no
record of its own yet: it is not found (None), as for a job Slurm no longer knows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

T = TypeVar("T")
# (unique job id, array job id, array task id, het job id, het offset); None = not set
JobKey = tuple[int, int | None, int | None, int | None, int | None]


@dataclass(frozen=True)
class JobRef:
    """A parsed job id: a plain job, an array task or a het component."""

    kind: Literal["job", "array", "het"]
    job_id: int
    index: int | None = None


def parse_job_id(job_id: str) -> JobRef:
    """``job_id`` (already checked by check_job_id) as a JobRef."""
    if "_" in job_id:
        base, task = job_id.split("_", 1)
        return JobRef("array", int(base), int(task))
    if "+" in job_id:
        base, offset = job_id.split("+", 1)
        return JobRef("het", int(base), int(offset))
    return JobRef("job", int(job_id))


def matches(ref: JobRef, key: JobKey) -> bool:
    """True when the record with ``key`` is the one ``ref`` names."""
    unique, array_id, task, het_id, offset = key
    if ref.kind == "array":
        return array_id == ref.job_id and task == ref.index
    if ref.kind == "het":
        return het_id == ref.job_id and offset == ref.index
    return unique == ref.job_id


def match_job(ref: JobRef, records: Iterable[tuple[JobKey, T]]) -> T | None:
    """The first record ``ref`` names, or None."""
    return next((rec for key, rec in records if matches(ref, key)), None)
