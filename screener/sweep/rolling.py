"""`screener sweep --submit --rolling` (issue 22): keep idle nodes fresh through the day, so
a screened job mostly finds its nodes passed within ``prolog.fresh_s`` and the prolog takes
its fast path (a sentinel read) instead of probing them.

Each call picks at most ``[sweep] rolling_nodes`` idle nodes that never passed or whose last
pass is older than ``rolling_age_s`` (never-judged first, then the oldest), and submits the
sweep script over exactly them: held ``--exclusive`` (no job lands on a node mid-probe, as
the issue asks: never a probe over SSH of a node Slurm may hand to a job), at ``--nice``
``rolling_nice`` (a user job waiting for a node goes first), with a time limit from the
probe's own bound (backfill can fit it between jobs). Inside the job the sweep runs in
rolling mode: it probes and judges the held nodes and drains a slow one like any sweep, but
leaves screener-drained nodes and due drains to the nightly sweep (``resume_after`` counts
nightly sweeps, not ticks of a timer). One rolling job pending at a time: while one waits
for its nodes, the next call submits nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from screener.errors import SlurmError, StoreError
from screener.policy import Policy, database_url
from screener.process import run_command
from screener.sweep.mode import submit_argv

ROLLING_JOB = "screener-rolling"  # its own job name: squeue tells it from the nightly sweep
NEVER = datetime.min.replace(tzinfo=UTC)  # sort key of a node never judged: first in line


def rolling_pick(
    idle: Sequence[str],
    latest: Mapping[str, tuple[str, datetime]],
    now: datetime,
    age_s: float,
    limit: int,
) -> list[str]:
    """Of ``idle``, the nodes due for a rolling probe, most overdue first, at most ``limit``:
    never judged, last verdict not OK (UNKNOWN, or slow but not drained), or last pass
    older than ``age_s``. ``latest``: node -> (status value, run start). Pure."""
    due: list[tuple[datetime, str]] = []
    cutoff = now - timedelta(seconds=age_s)
    for node in idle:
        status, at = latest.get(node, ("", NEVER))
        if status != "OK" or at <= cutoff:
            due.append((NEVER if status != "OK" else at, node))
    return [node for _, node in sorted(due)[:limit]]


def time_limit_min(bound_s: float) -> int:
    """sbatch --time in whole minutes for a job that takes at most ``bound_s``."""
    return max(1, math.ceil(bound_s / 60.0))


def rolling_argv(
    nodes: Sequence[str], script: str, nice: int, minutes: int, job_args: Sequence[str]
) -> list[str]:
    """sbatch the sweep script as a rolling job over exactly ``nodes``."""
    options = [
        f"--nice={nice}",  # below every user job: one waiting for these nodes goes first
        f"--time={minutes}",  # the probe's bound: backfill can fit it between jobs
    ]
    return submit_argv(nodes, script, job_args, ROLLING_JOB, options)


def pending_argv() -> list[str]:
    """squeue: the ids of rolling jobs still waiting for their nodes."""
    return [
        "squeue",
        f"--name={ROLLING_JOB}",
        "--states=PENDING",  # a running one holds its nodes: they are not idle, not picked
        "--noheader",
        "--format=%i",  # the job id alone
    ]


def pending_rolling(timeout_s: float) -> list[str]:
    """Rolling jobs still pending; SlurmError when squeue fails (then nothing is submitted)."""
    res = run_command(pending_argv(), timeout=timeout_s)
    if res.exit_status != 0:
        raise SlurmError(f"squeue failed: {res.stderr.strip() or res.exit_status}")
    return res.stdout.split()


def latest_verdicts(policy: Policy, nodes: Sequence[str]) -> dict[str, tuple[str, datetime]]:
    """Each node's latest verdict of any recipe (the prolog's own freshness input)."""
    from screener.store import open_store
    from screener.store.slurm_records import SlurmRecords

    url = database_url(policy)
    with open_store(url, upgrade=url.startswith("sqlite")) as store:
        return SlurmRecords(store).latest_verdicts(nodes)


def due_nodes(
    policy: Policy, idle: Sequence[str], now: datetime, log: Callable[[str], None]
) -> list[str]:
    """The idle nodes the next rolling job should hold; [] (logged) when none is due or a
    rolling job is still pending. The database or squeue failing raises: nothing submitted."""
    sw = policy.sweep
    waiting = pending_rolling(policy.slurm.command_timeout_s)
    if waiting:
        log(f"rolling job {', '.join(waiting)} still waits for its nodes: nothing submitted")
        return []
    try:
        latest = latest_verdicts(policy, idle)
    except StoreError as exc:
        raise StoreError(f"cannot tell which nodes are due: {exc}") from None
    picked = rolling_pick(idle, latest, now, sw.rolling_age_s, sw.rolling_nodes)
    if not picked:
        log(f"every idle node passed within {sw.rolling_age_s:g} s: nothing submitted")
    return picked
