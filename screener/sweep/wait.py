"""`sweep --submit --wait`: follow the sweep job until Slurm reports its end state.

screener polls the job itself instead of `sbatch --wait`, whose poll interval grows 2 s ->
8 s -> 32 s (22.05): a 14 s sweep job was seen finished 28 s after its epilog ended. Here
the interval is a tenth of the time waited so far, between POLL_FIRST_S and POLL_MAX_S, so
a job is seen ended within ~10 % of its run (a 5 s dry-run sweep within 0.5 s; doubling the
interval saw it 2.3 s late, a third of its wall) and a long one costs one squeue every 5 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from screener.errors import SlurmError
from screener.slurm import SlurmClient

POLL_FIRST_S = 0.25
POLL_MAX_S = 5.0
POLL_SHARE = 0.1  # the interval as a share of the time waited: how late an end may be seen
# States a job does not leave (squeue's long names; "REQUEUED" goes back to PENDING).
END_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)


@dataclass(frozen=True)
class JobEnd:
    """How the wait ended: the job's end state, or why none was seen."""

    state: str | None  # None: no end state seen (timed out, or the job is gone)
    detail: str

    @property
    def exit_status(self) -> int:
        """0 only for a job that COMPLETED: anything else is worth a cron mail."""
        return 0 if self.state == "COMPLETED" else 1


def next_poll(waited: float) -> float:
    """The interval after ``waited`` seconds of waiting: POLL_SHARE of it, within
    POLL_FIRST_S and POLL_MAX_S (a minute's job: ~40 squeue calls, then one per 5 s)."""
    return min(POLL_MAX_S, max(POLL_FIRST_S, POLL_SHARE * waited))


def wait_for_job(
    client: SlurmClient,
    job_id: str,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobEnd:
    """Poll ``job_id`` until it reaches an end state, is forgotten, or ``timeout_s`` ends.
    A failed query (a busy slurmctld) is retried until the timeout; the last one is said."""
    start = clock()
    deadline = start + timeout_s
    last = "not queried yet"
    while True:
        try:
            job = client.job(job_id)
        except SlurmError as exc:
            last = f"last query failed: {exc}"
        else:
            if job is None:  # purged after MinJobAge: it ended, but how is not known now
                return JobEnd(None, "Slurm no longer knows it (its end state was not seen)")
            if job.state in END_STATES:
                return JobEnd(job.state, job.state)
            last = f"still {job.state or 'in an unknown state'}"
        left = deadline - clock()
        if left <= 0:
            return JobEnd(None, f"not ended after {timeout_s:.0f} s ({last})")
        sleep(min(next_poll(clock() - start), left))
