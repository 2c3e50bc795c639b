"""`screener prolog`: the PrologSlurmctld hook's entry.

Read the job from the environment, screen only opted-in jobs, open the store and the Slurm
client, hand the job to execute.run (which runs the steps plan.py decides: skip nodes that
passed recently, never flaky ones; screen the rest within the budget; drain confirmed slow
nodes behind the mass-drain guard), and exit 1 when it drained so Slurm requeues the job
onto healthy nodes. Any internal error fails open (exit 0, said in the log) unless
``fail_closed``.

The screen goes through ``app.run_screen``, like `screener screen`: a run tag on every remote
process, SIGTERM (PrologEpilogTimeout) stops fio on the nodes and marks the run failed, and
a database that does not answer sends the results to the local spool. A confirmed slow node
is drained all the same (issue 45): the guard counts screener's drains from Slurm, and the
drain is journalled in the run's spool file; anything else that fails still fails open.
Once a hook finds the database up, it replays what waits in the spool after its decision
(bounded: ``spool.REPLAY_MAX_FILES`` files, at most ``spool.REPLAY_BUDGET_S`` and never past
the budget; under hookd after the exit code). Heavy modules (the store, the screen) are
imported only once a job is selected.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from screener.errors import ScreenerError, StoreError
from screener.hooks.job import MAX_ENV_VALUE, job_from_env, selects
from screener.hooks.log import HookLog, describe_error
from screener.hostlist import fold_nodes
from screener.policy import Policy, database_url, shorten
from screener.prolog.plan import EXIT_REQUEUE, Deadline
from screener.slurm import SlurmClient, SlurmJob
from screener.slurm.choose import ChosenLater
from screener.slurm.client import check_job_id

if TYPE_CHECKING:
    from screener.prolog.execute import Context
    from screener.store import Store
    from screener.store.limits import StoreLimits


def run_prolog(
    policy: Policy, env: Mapping[str, str], log: HookLog, client: SlurmClient | None = None
) -> int:
    """The hook's exit code: 0 = let the job start, 1 = requeue it (nodes were drained, or
    ``fail_closed`` and something failed). Every failure, whatever its type, fails open
    with one log line; only SIGTERM (Terminated, a BaseException) goes through."""
    t0 = time.monotonic()
    job_id = ""
    try:
        try:
            job = job_from_env(env)
        except ScreenerError as exc:
            if not _opted_in(policy, env):  # fail_closed must not requeue a job not screened
                log(f"cannot read the job ({exc}); it did not opt in: not screened")
                return 0
            return _fail(policy, log, f"cannot read the job: {exc}")
        job_id = job.job_id
        return _run_job(policy, job, log, client, t0)
    except Exception as exc:  # a bug (or MemoryError, RecursionError) must not requeue jobs
        where = f"job {job_id}: " if job_id else ""
        return _fail(policy, log, f"{where}internal error: {describe_error(exc)}")


def _opted_in(policy: Policy, env: Mapping[str, str]) -> bool:
    """Would the job be selected, judging by its name, partition and comment alone?"""

    def get(name: str) -> str:
        return str(env.get(f"SLURM_JOB_{name}", ""))[:MAX_ENV_VALUE]

    job = SlurmJob("0", (), partition=get("PARTITION"), name=get("NAME"), comment=get("COMMENT"))
    return selects(job, policy.prolog)[0]


def _run_job(
    policy: Policy, job: SlurmJob, log: HookLog, client: SlurmClient | None, t0: float
) -> int:
    """Select, open the store and the Slurm client, screen: run_prolog's body."""
    ok, why = selects(job, policy.prolog)
    if not ok:
        log(f"job {job.job_id}: not screened: {why}")
        return 0
    from screener.store import open_store  # only for selected jobs: the rest exit at once

    url = database_url(policy)
    store: Store | None = None
    later = ChosenLater(policy.slurm) if client is None else None  # chosen while we go on
    deadline = Deadline(t0, policy.prolog.budget_s)
    try:
        on = f"({shorten(job.name)!r}) on {fold_nodes(job.nodes)}"
        log(f"job {job.job_id} {on}: screening ({why})")
        limits = _store_limits(policy, deadline)
        store = open_store(url, upgrade=url.startswith("sqlite"), limits=limits)
        unavailable = None
    except StoreError as exc:
        if url.startswith("sqlite"):  # a local file: a path/permission mistake, not an outage
            return _fail(policy, log, f"job {job.job_id}: {exc}")
        unavailable = str(exc)
        log(f"job {job.job_id}: database unavailable ({exc}): every node is probed, results go")
        log("to the spool; a confirmed slow node is drained, recorded there, replayed later")
    except ScreenerError as exc:
        return _fail(policy, log, f"job {job.job_id}: {exc}")
    try:
        # Imported here, not at the top: execute imports the screen (app, pipeline, asyncssh,
        # sqlalchemy), 0.6-0.8 s on top of this module's 0.2 s (measured 2026-11-28 on the
        # 2-core test machine) that a job not screened never pays: it exits at once.
        from screener.prolog import execute

        slurm: SlurmClient | None = later if later is not None else client
        assert slurm is not None  # one of the two is always set
        fail = functools.partial(_fail, policy, log)
        ctx = execute.Context(policy, job, slurm, store, unavailable, log, deadline, fail)
        code = _requeue_or_start(ctx, execute.run(ctx), t0)
        _say_backend(later, client, log)  # a choice that failed fails the hook, as before
        if store is not None:
            _replay_after(policy, store, code, deadline, t0, log)
        return code
    except ScreenerError as exc:
        return _fail(policy, log, f"job {job.job_id}: {exc}")
    finally:
        if store is not None:
            store.close()


def _store_limits(policy: Policy, deadline: Deadline) -> StoreLimits:
    """The [store] limits within the budget: no wait on the database ends past it (less
    half the decide reserve), and none takes over a quarter of it (a busy database leaves
    the rest to the screen; the results then go to the spool)."""
    from screener.store.limits import StoreLimits

    end = deadline.start + deadline.budget_s - deadline.reserve_s / 2
    return StoreLimits.from_policy(policy.store).until(end)


def _replay_after(
    policy: Policy, store: Store, code: int, deadline: Deadline, t0: float, log: HookLog
) -> None:
    """What waits in the spool, replayed now that the database answered this hook: after the
    decision, within what is left of the budget (under hookd, after the exit code). Not when
    a run spooled since this hook started (the database failed meanwhile). Never raises."""
    from screener import spool
    from screener.hooks import later
    from screener.store.engine import describe, parse_url

    spool_dir = policy.store.spool_dir
    started = time.time() - (time.monotonic() - t0)
    if spool.spooled_since(spool_dir, started):
        return
    left = min(spool.REPLAY_BUDGET_S, deadline.left(time.monotonic()))
    if left <= 0:
        return
    url = database_url(policy)
    where = describe(parse_url(url))

    def replay(into: Store | None) -> None:
        try:
            if into is None:  # after the exit code: this hook's store is closed by then
                from screener.store import open_store

                with open_store(url) as own:
                    done = spool.replay(own, spool_dir, where, budget_s=left)
            else:
                done = spool.replay(into, spool_dir, where, budget_s=left)
        except Exception as exc:  # replay is bookkeeping: it never changes the hook's exit
            log(f"spool not replayed: {describe_error(exc)}")
            return
        if done:
            log(f"spool replayed: {spool.replayed_line(done)}")

    if not spool.spool_files(spool_dir) and not spool.ingest_files(spool_dir):
        return  # nothing waits: no store round trip
    if code == 0 and later.can_defer():
        later.defer(lambda: replay(None))
    else:
        replay(store)


def _say_backend(later: ChosenLater | None, client: SlurmClient | None, log: HookLog) -> None:
    """Log the Slurm backend (chosen beside the screen, or passed in); raises SlurmError when
    choosing it failed (slurm.backend = pyslurm and pyslurm unusable)."""
    if later is not None:
        log(f"slurm backend {later.chosen()[1]}")
    elif client is not None:
        log(f"slurm backend {client.name}: passed in")


def _requeue_or_start(ctx: Context, code: int, t0: float) -> int:
    """The screened job's exit code, said in the log: requeued (the release helper started
    with ``release_requeued``), or it may start."""
    job, log = ctx.job, ctx.log
    if code == EXIT_REQUEUE:
        if ctx.policy.prolog.release_requeued:
            _spawn_release(job.job_id, log)
        log(f"job {job.job_id}: exit {EXIT_REQUEUE} so Slurm requeues it onto healthy nodes")
        return EXIT_REQUEUE
    log(f"job {job.job_id}: may start ({time.monotonic() - t0:.2f}s)")
    return code


def _fail(policy: Policy | None, log: HookLog, message: str) -> int:
    """An error inside screener: open (job runs) by default, closed (requeue) only when a
    policy that could be read says so. Never raises: this is the last word of the hook."""
    closed = policy is not None and policy.prolog.fail_closed
    with contextlib.suppress(Exception):  # even the log failing must not change the exit
        if closed:
            log(f"{message}; fail closed (prolog.fail_closed = true): job requeued")
        else:
            log(f"{message}; fail open: the job runs, nobody drained")
    return EXIT_REQUEUE if closed else 0


def _spawn_release(job_id: str, log: HookLog) -> None:
    """Start a detached `screener release JOB`: once Slurm has requeued the job it makes it
    eligible at once (22.05 otherwise holds it ~2 minutes for BeginTime)."""
    argv = [sys.executable, "-m", "screener.cli", "release", check_job_id(job_id)]
    try:
        subprocess.Popen(  # fixed argv, validated job id
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives the hook; slurmctld does not wait for it
            env=dict(os.environ),
        )
    except OSError as exc:
        log(f"cannot start the release helper ({exc}); the job starts after its BeginTime")
