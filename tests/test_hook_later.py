"""Deferred hook work and the per-job lock (screener.hooks.later, issue 22): what a hookd
worker runs after the exit code, and the flock that orders a deferred in-job iostat start
before the job's epilog stop."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from screener.hooks import later
from screener.hooks.later import JobLock
from screener.hooks.log import HookLog
from screener.policy import Policy, policy_from_dict
from screener.slurm.client import SlurmJob


def test_deferred_work_runs_in_order_only_after_exit_0() -> None:
    ran: list[str] = []

    def boom() -> None:
        ran.append("boom")
        raise RuntimeError("one step failing must not stop the next")

    later.defer(lambda: ran.append("a"))
    later.defer(boom)
    later.defer(lambda: ran.append("b"))
    assert later.run_pending(0) == 3
    assert ran == ["a", "boom", "b"]
    later.defer(lambda: ran.append("requeued"))
    assert later.run_pending(1) == 0  # a requeued job needs no in-job iostat
    assert later.run_pending(0) == 0  # and the dropped work does not come back
    assert ran == ["a", "boom", "b"]


def test_the_lock_is_exclusive_and_bounded(tmp_path: Path) -> None:
    first = JobLock.take(str(tmp_path / "spool"), "42")
    assert first is not None
    assert oct((tmp_path / "spool").stat().st_mode & 0o777) == "0o700"
    assert JobLock.take(str(tmp_path / "spool"), "42") is None  # held: one try, no wait
    assert JobLock.take(str(tmp_path / "spool"), "43") is not None  # another job: its own
    first.release()
    again = JobLock.take(str(tmp_path / "spool"), "42")
    assert again is not None
    again.release(remove=True)
    assert not (tmp_path / "spool" / "iostat-42.lock").exists()


def test_a_waiter_ends_up_on_the_file_at_the_path_after_the_holder_removed_it(
    tmp_path: Path,
) -> None:
    # The epilog removes the file as it releases; whoever waited on the old (unlinked)
    # file must not hold a lock nobody else can see: it locks the file now at the path.
    spool = str(tmp_path)
    holder = JobLock.take(spool, "7")
    assert holder is not None
    got: list[JobLock | None] = []
    waiter = threading.Thread(target=lambda: got.append(JobLock.take(spool, "7", 30.0)))
    waiter.start()
    holder.release(remove=True)
    waiter.join(timeout=60)
    assert got and got[0] is not None
    path = tmp_path / "iostat-7.lock"
    assert os.fstat(got[0].fd).st_ino == path.stat().st_ino
    assert JobLock.take(spool, "7") is None  # and it really holds that one
    got[0].release(remove=True)


def test_stale_lock_files_go_but_a_held_or_recent_one_stays(tmp_path: Path) -> None:
    # Jobs whose epilog never ran leave 0-byte lock files; the next epilog removes those
    # older than the bound, never one a running prolog or epilog holds, nor anything else.
    spool = str(tmp_path)
    day = 86400.0
    old_free = JobLock.take(spool, "1")
    old_held = JobLock.take(spool, "2")
    recent = JobLock.take(spool, "3")
    assert old_free and old_held and recent
    old_free.release()
    recent.release()
    other = tmp_path / "spool-0001.json"  # the spool's own files are not locks
    other.write_text("{}")
    for p in (old_free.path, old_held.path, other):
        os.utime(p, (0, 0))
    assert later.remove_stale(spool, day) == 1
    assert not old_free.path.exists()
    assert old_held.path.exists() and recent.path.exists() and other.exists()
    old_held.release()
    assert later.remove_stale(spool, day) == 1 and not old_held.path.exists()
    assert later.remove_stale(spool, day, now=recent.path.stat().st_mtime + 2 * day) == 1
    assert later.remove_stale(str(tmp_path / "none"), day) == 0  # no spool dir: nothing


def test_no_lock_where_the_spool_cannot_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert JobLock.take(str(blocker / "spool"), "1") is None  # callers go on without it


def test_the_prolog_defers_only_with_a_lock_and_holds_it_through_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wiring in screener.prolog.execute, as a hookd worker runs it: the start itself is
    # replaced by a recorder (its real SSH path runs in tests/test_hookd.py on real Slurm).
    from screener.prolog import execute
    from screener.prolog.plan import Deadline

    monkeypatch.setitem(later._state, "held", True)  # as `hold()` in a worker
    started: list[tuple[str, dict[str, str], bool]] = []
    spool = tmp_path / "spool"

    async def start(ctx: execute.Context, devices: dict[str, str] | None = None) -> None:
        held = JobLock.take(str(spool), ctx.job.job_id) is None  # the epilog would wait now
        started.append((ctx.job.job_id, dict(devices or {}), held))

    def context(policy: Policy) -> execute.Context:  # no Slurm, no store: not needed here
        deadline = Deadline(0.0, 60.0)
        return execute.Context(policy, job, None, None, None, log, deadline, lambda _: 0)

    monkeypatch.setattr(execute, "_iostat_only", start)
    job = SlurmJob("5", ("n1", "n2"))
    log = HookLog("screener prolog")
    blocker = tmp_path / "file"
    blocker.write_text("")
    no_spool = policy_from_dict({"store": {"spool_dir": str(blocker / "spool")}})
    assert not execute._iostat_later(context(no_spool), {})  # no lock: the caller starts it
    assert log.lines[-1].startswith("in-job iostat starts before the exit: no lock in")
    assert later.run_pending(0) == 0 and started == []

    policy = policy_from_dict({"store": {"spool_dir": str(spool)}})
    assert execute._iostat_later(context(policy), {"n1": "vdb"})
    assert JobLock.take(str(spool), "5") is None  # held from before the exit code is sent
    assert later.run_pending(0) == 1
    assert started == [("5", {"n1": "vdb"}, True)]
    free = JobLock.take(str(spool), "5")  # released once iostat was started
    assert free is not None
    free.release(remove=True)
