"""Work a prolog does after Slurm has its exit code (issue 22).

Under `screener hookd` the worker sends the hook's exit code first and only then runs what
was deferred here, so the job starts without waiting for it (in-job iostat: one SSH round
per node, ~0.4 s on 8 nodes). A hook in its own process has no "after" (slurmctld waits
for the process), so there nothing is deferred and the work runs inline as before.

A deferred in-job iostat start holds the job's lock file until it is done; the job's
epilog takes the same lock before it stops iostat, so a job that ends before the start
does not leave a detached iostat running until its bound.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

LOCK_PREFIX = "iostat-"  # <spool_dir>/iostat-<job id>.lock
LOCK_POLL_S = 0.02  # how often a waiting epilog tries the lock again

_state = {"held": False}
_pending: list[Callable[[], None]] = []


def hold() -> None:
    """This process sends the exit code before it runs the deferred work (a hookd worker)."""
    _state["held"] = True


def can_defer() -> bool:
    """True in a hookd worker: work deferred now runs after the exit code is out."""
    return _state["held"]


def defer(work: Callable[[], None]) -> None:
    """Run ``work`` after the exit code (only when that code is 0); it logs its own failures."""
    _pending.append(work)


def run_pending(code: int) -> int:
    """Run the deferred work, in order, when the hook exited 0 (a requeued job needs no
    monitoring); one that raises does not stop the next. How many ran."""
    work = list(_pending)
    _pending.clear()
    if code != 0:
        return 0
    for item in work:
        with contextlib.suppress(Exception):
            item()
    return len(work)


class JobLock:
    """An exclusive flock on ``<spool_dir>/iostat-<job id>.lock``: the prolog's deferred
    in-job iostat start and the job's epilog stop take it in turn."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    @classmethod
    def take(cls, spool_dir: str, job_id: str, wait_s: float = 0.0) -> JobLock | None:
        """The job's lock within ``wait_s`` seconds (0: one try); None when another process
        kept it longer or the spool directory cannot hold the file (callers then go on
        without it, as before the lock existed)."""
        path = Path(spool_dir) / f"{LOCK_PREFIX}{job_id}.lock"
        deadline = time.monotonic() + wait_s
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return None
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError:
                return None
            if not _flock(fd, deadline):
                os.close(fd)
                return None
            if _same_file(fd, path):
                return cls(fd, path)
            os.close(fd)  # the epilog removed the file while we waited: lock the new one

    def release(self, remove: bool = False) -> None:
        """Unlock (``remove``: delete the file first, as the epilog does: the job is done)."""
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self.fd)


def remove_stale(spool_dir: str, older_than_s: float, now: float | None = None) -> int:
    """Delete job lock files untouched for ``older_than_s`` seconds that nobody holds: those
    of jobs whose epilog never ran (a controller restart, a hook killed). The epilog calls
    it after its own; a lock held now, or a file replaced meanwhile, is left. How many."""
    cutoff = (time.time() if now is None else now) - older_than_s
    gone = 0
    try:
        names = [n for n in os.listdir(spool_dir) if n.startswith(LOCK_PREFIX)]
    except OSError:
        return 0
    for path in (Path(spool_dir) / n for n in names if n.endswith(".lock")):
        try:
            if path.lstat().st_mtime >= cutoff:
                continue
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:  # one try (a deadline already past): held now by a prolog or epilog, it stays
            if _flock(fd, 0.0) and _same_file(fd, path):
                path.unlink(missing_ok=True)
                gone += 1
        finally:
            os.close(fd)
    return gone


def _flock(fd: int, deadline: float) -> bool:
    """LOCK_EX on ``fd``, trying until ``deadline`` (a blocking flock could not be bounded
    without a signal, and a hook must not touch its own signal handlers for this)."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(LOCK_POLL_S)
        except OSError:
            return False


def _same_file(fd: int, path: Path) -> bool:
    """The locked descriptor is still the file at ``path`` (not one unlinked meanwhile)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except OSError:
        return False
