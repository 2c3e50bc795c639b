"""`screener prolog`: the PrologSlurmctld flow.

Read the job from the environment, screen only opted-in jobs, skip nodes that passed
recently (never flaky ones), screen the rest within the budget, drain confirmed slow nodes
(behind the mass-drain guard) and exit 1 so Slurm requeues the job onto healthy nodes.
Any internal error fails open (exit 0, said in the log) unless ``fail_closed``.

The screen goes through ``app.run_screen``, like `screener screen`: a run tag on every remote
process, SIGTERM (PrologEpilogTimeout) stops fio on the nodes and marks the run failed, and
a database that does not answer sends the results to the local spool. Nobody is drained
from a run the database does not hold (it could never be resumed): that is a fail-open.
Heavy modules (the store, the pipeline) are imported only once a job is selected.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from screener.errors import ScreenerError, StoreError
from screener.hooks.drain_rules import drainable, small_allocation
from screener.hooks.job import MAX_ENV_VALUE, job_from_env, selects
from screener.hooks.log import HookLog, describe_error
from screener.hostlist import fold_nodes
from screener.policy import Policy, database_url, shorten
from screener.prolog.rules import fast_path
from screener.slurm import SlurmClient, SlurmJob
from screener.slurm.choose import ChosenLater
from screener.slurm.client import check_job_id

if TYPE_CHECKING:
    from screener.pipeline import ScreenResult
    from screener.probe.sentinel import SentinelResult
    from screener.run.loop import Beside
    from screener.store import Store
    from screener.store.slurm_records import SlurmRecords
    from screener.transport.base import Transport

EXIT_REQUEUE = 1  # non-zero from PrologSlurmctld: Slurm requeues the batch job
# Seconds kept back from the budget for deciding, draining and recording.
DECIDE_RESERVE_S = 2.0


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
    try:
        on = f"({shorten(job.name)!r}) on {fold_nodes(job.nodes)}"
        log(f"job {job.job_id} {on}: screening ({why})")
        store = open_store(url, upgrade=url.startswith("sqlite"))
        unavailable = None
    except StoreError as exc:
        if url.startswith("sqlite"):  # a local file: a path/permission mistake, not an outage
            return _fail(policy, log, f"job {job.job_id}: {exc}")
        unavailable = str(exc)
        log(f"job {job.job_id}: database unavailable ({exc}): every node is probed, results go")
        log("to the spool, and nobody is drained (a drain the database cannot hold is never")
        log("resumed)")
    except ScreenerError as exc:
        return _fail(policy, log, f"job {job.job_id}: {exc}")
    try:
        slurm: SlurmClient | None = later if later is not None else client
        assert slurm is not None  # one of the two is always set
        code = _screen_job(policy, job, slurm, store, unavailable, log, t0)
        _say_backend(later, client, log)  # a choice that failed fails the hook, as before
        return code
    except ScreenerError as exc:
        return _fail(policy, log, f"job {job.job_id}: {exc}")
    finally:
        if store is not None:
            store.close()


def _say_backend(later: ChosenLater | None, client: SlurmClient | None, log: HookLog) -> None:
    """Log the Slurm backend (chosen beside the screen, or passed in); raises SlurmError when
    choosing it failed (slurm.backend = pyslurm and pyslurm unusable)."""
    if later is not None:
        log(f"slurm backend {later.chosen()[1]}")
    elif client is not None:
        log(f"slurm backend {client.name}: passed in")


def _screen_job(
    policy: Policy,
    job: SlurmJob,
    client: SlurmClient,
    store: Store | None,
    unavailable: str | None,
    log: HookLog,
    t0: float,
) -> int:
    from screener import app
    from screener.hooks import later
    from screener.hooks.start_iostat import start_job_iostat
    from screener.probe.fio import recipe_fingerprint
    from screener.probe_data import Status, Trigger
    from screener.prolog.sentinel import own_dd_readings, record_dd, sentinels_beside
    from screener.prolog.triage import escalation, plan, triage_policy, with_references
    from screener.store.slurm_records import SlurmRecords

    pp = policy.prolog
    records = SlurmRecords(store) if store is not None else None
    skip: list[str] = []
    probe = list(job.nodes)
    last: dict[str, datetime] = {}
    statuses: dict[str, str] = {}
    flaky: set[str] = set()
    if records is not None:
        from screener.hooks.drains import finish_pending

        now = datetime.now(UTC)
        finish_pending(client, records, now, log, nodes=job.nodes)  # a killed run's drains
        # what the full probe said last (with triage on): a triage's own doubt is re-triaged
        short = recipe_fingerprint(triage_policy(policy).probe) if pp.triage else None
        every, latest = records.latest_verdicts_apart(job.nodes, short)
        last = {n: at for n, (st, at) in every.items() if st == Status.OK}  # = last_pass
        statuses = {n: st for n, (st, _) in latest.items()}
        flaky = records.flaky_since(job.nodes, now - timedelta(seconds=pp.flaky_window_s))
        skip, probe = fast_path(job.nodes, last, flaky, now, pp.fresh_s)
    notes: dict[str, str] = {}
    iostat_started = False
    sent: list[SentinelResult] = []  # the sentinels that read beside the others' screen
    beside: Beside | None = None
    earlier: dict[str, float] = {}  # failed sentinels: a first window for round 1 to decide
    if skip and probe:  # a triage of a few nodes gets references: the freshest passes
        freshest = sorted(skip, key=lambda n: last[n], reverse=True)
        skip, probe = _with_references(policy, job, freshest, probe, log)
    if skip and records is not None and pp.sentinel:
        if probe:  # the others are probed anyway: the sentinels read beside (issue 22)
            usual, dd_usual = _usual(policy, records, skip), own_dd_readings(policy, records, skip)
            beside = sentinels_beside(policy, skip, usual, sent, dd_usual)
        else:
            inline = not later.can_defer()  # in-job iostat on the sentinels' connections
            skip, probe, notes, results = _sentinels(policy, job, records, skip, log, inline)
            iostat_started = pp.iostat and not probe and inline
            earlier = _sentinel_ratios(results)
            if probe:  # sentinels failed: triaged beside those that read most as usual
                skip, probe = _with_references(policy, job, _steadiest(results), probe, log)
    if skip and beside is None:
        _fast_path(policy, job, records, {n: last[n] for n in skip}, notes, log)
    outcome: list[int] = []
    held: list[str] = []  # with triage: nodes for the full probe only, after it

    def run(
        nodes: list[str],
        screen_policy: Policy,
        stage: str,
        beside: Beside | None = None,
        earlier: Mapping[str, float] | None = None,
    ) -> tuple[list[str], list[str]]:
        """Screen ``nodes``, act on the stored run (drain, in-job iostat); after a triage
        (``stage``: "triage", "escalated" or ""), the nodes it left ambiguous and references
        (in-job iostat then waits for those). With ``beside`` (the fresh nodes' sentinels),
        a node whose sentinel failed joins them, or gets the full probe after the screen;
        ``earlier``: what the failed sentinels read, each against its usual."""
        triage = stage == "triage"
        more: list[tuple[list[str], list[str]]] = []

        async def after(transport: Transport, result: ScreenResult) -> None:
            for note in result.notes:  # planted names moved aside (screener.probe.private)
                log(note)
            failed = [r.node for r in sent if not r.passed] if beside is not None else []
            left = pp.budget_s - (time.monotonic() - t0) - DECIDE_RESERVE_S
            code = _act(policy, job, client, records, result, log, left)
            outcome.append(code)
            if code == 0 and records is not None and not result.store_error:
                if triage:
                    also = [*held, *(n for n in failed if n not in held)]
                    doubt, refs = escalation(result.summary, policy, also, result.reprobed)
                else:
                    doubt, refs = with_references(result.summary, policy, failed)
                if doubt:
                    more.append((doubt, refs))
            if code == 0 and not more and pp.iostat:
                devices = _devices(result)
                if not _iostat_later(policy, job, devices, log):
                    await start_job_iostat(transport, job, devices, policy, log)

        budget = pp.budget_s - (time.monotonic() - t0) - DECIDE_RESERVE_S
        app.run_screen(
            nodes,
            screen_policy,
            trigger=Trigger.PROLOG,
            job_id=job.job_id,
            deadline_s=max(budget, 0.1),
            store=store,
            db_unavailable=unavailable,
            after=after,
            run_info={"prolog_probe": stage} if stage else None,
            beside=beside,
            earlier=earlier,
            # a triage compares a node it has no history of with the full probe's seq reads
            history_also=(policy.probe,) if triage else (),
        )
        return more[0] if more else ([], [])

    def fresh_checked() -> None:
        """Log and record the sentinels that read beside the screen: the passed ones took
        the fast path; the failed ones were screened after it (or, no budget, said so)."""
        passed, _, said = _sentinel_outcome(sent, log)
        record_dd(policy, records, sent, log)
        if passed:
            _fast_path(policy, job, records, {n: last[n] for n in passed}, said, log, True)

    if probe:
        left = pp.budget_s - (time.monotonic() - t0) - DECIDE_RESERVE_S
        # with the store: a node it holds no full verdict of gets the full probe first
        unseen = {n for n in probe if n not in statuses} if records is not None else set()
        tri, held, why = plan(probe, len(job.nodes), statuses, flaky, policy, left, unseen)
        if pp.triage and not tri:
            log(f"triage skipped ({why}): full probe")
        elif tri and held:
            log(f"triage of {fold_nodes(tri)}; {why}: full probe after it")
        elif tri and why:
            log(f"triage of {fold_nodes(tri)}; {why}")
        first = (tri, triage_policy(policy), "triage") if tri else (probe, policy, "")
        doubt, refs = run(*first, beside, earlier)
        fresh_checked()
        if doubt and max(outcome, default=0) == 0:
            _escalate(doubt, refs, policy, job, log, t0, run, first[2] or "screen")
    elif pp.iostat and not iostat_started:
        _iostat_now_or_later(policy, job, log)
    code = max(outcome, default=0)  # a drain by either screen requeues
    if code == EXIT_REQUEUE:
        if pp.release_requeued:
            _spawn_release(job.job_id, log)
        log(f"job {job.job_id}: exit {EXIT_REQUEUE} so Slurm requeues it onto healthy nodes")
        return EXIT_REQUEUE
    log(f"job {job.job_id}: may start ({time.monotonic() - t0:.2f}s)")
    return code


def _escalate(
    doubt: list[str],
    refs: list[str],
    policy: Policy,
    job: SlurmJob,
    log: HookLog,
    t0: float,
    run: Callable[[list[str], Policy, str], object],
    first: str = "triage",
) -> None:
    """The full probe for the nodes a triage left ambiguous or held back (``doubt``) beside
    healthy references, when the budget still holds it (both rounds); else they keep
    their verdict (or, held back, none: never drained) and the job starts, with in-job
    iostat (which waited for this)."""
    from screener.prolog.triage import full_probe_fits

    pp = policy.prolog
    if not full_probe_fits(policy, pp.budget_s - (time.monotonic() - t0) - DECIDE_RESERVE_S):
        log(f"{fold_nodes(doubt)}: no budget left for the full probe after the {first}")
        if pp.iostat:
            _iostat_now_or_later(policy, job, log)
        return
    log(f"full probe of {fold_nodes(doubt)} after the {first}, beside {fold_nodes(refs)}")
    run([*doubt, *refs], policy, "escalated")


def _sentinels(
    policy: Policy,
    job: SlurmJob,
    records: SlurmRecords,
    fresh: list[str],
    log: HookLog,
    iostat_now: bool = True,
) -> tuple[list[str], list[str], dict[str, str], list[SentinelResult]]:
    """(skip, probe, notes, results) when every node is fresh: those whose sentinel still
    reads like them stay on the fast path (their note says what it read); the others are
    to be probed (issue 28). All passed and ``iostat_now``: in-job iostat starts on the
    sentinel's connections."""
    from screener.prolog.sentinel import own_dd_readings, record_dd, sentinel_then_iostat

    usual, dd_usual = _usual(policy, records, fresh), own_dd_readings(policy, records, fresh)
    results = asyncio.run(
        sentinel_then_iostat(policy, job, fresh, usual, log, iostat_now, dd_usual)
    )
    skip, failed, notes = _sentinel_outcome(results, log)
    record_dd(policy, records, results, log)
    return skip, failed, notes, results


def _sentinel_ratios(results: list[SentinelResult]) -> dict[str, float]:
    """What each failed sentinel read against its node's usual (the ones that measured):
    a window before the screen, so round 1 can decide a node as slow again
    (verdict.confirm.decisive)."""
    return {r.node: r.ratio for r in results if not r.passed and r.ratio is not None}


def _steadiest(results: list[SentinelResult]) -> list[str]:
    """The nodes whose sentinel passed, the read closest to their usual first."""
    ok = [r for r in results if r.passed]

    def off(r: SentinelResult) -> float:
        if r.read_bw is None or not r.usual_bw:
            return float("inf")
        return abs(math.log(max(r.read_bw, 1.0) / r.usual_bw))

    return [r.node for r in sorted(ok, key=lambda r: (off(r), r.node))]


def _with_references(
    policy: Policy, job: SlurmJob, fresh: list[str], probe: list[str], log: HookLog
) -> tuple[list[str], list[str]]:
    """(skip, probe): with triage on, enough of the ``fresh`` nodes (best first) join a
    triage of too few nodes as its references (prolog.triage.fresh_references)."""
    from screener.prolog.triage import fresh_references

    refs = fresh_references(probe, fresh, len(job.nodes), policy)
    if refs:
        log(
            f"{fold_nodes(refs)}: fresh, triaged beside {fold_nodes(probe)} as references"
            f" (a triage is judged by {policy.verdict.min_peers} peers of its own recipe)"
        )
    return [n for n in fresh if n not in refs], [*probe, *refs]


def _sentinel_outcome(
    results: list[SentinelResult], log: HookLog
) -> tuple[list[str], list[str], dict[str, str]]:
    """(passed, failed, what each read): each failed node is logged as going to the full
    probe."""
    for r in results:
        if not r.passed:
            log(f"{r.node}: {r.reason}: full probe")
    passed = [r.node for r in results if r.passed]
    failed = [r.node for r in results if not r.passed]
    return passed, failed, {r.node: r.reason for r in results}


def _usual(policy: Policy, records: SlurmRecords, fresh: list[str]) -> dict[str, list[float]]:
    """Each fresh node's usual seq read, its sentinel's yardstick: its own baseline history
    of the full probe, or of the triage for a node only ever triaged."""
    from screener.pipeline import own_history  # app (the transport) imports it anyway

    now = datetime.now(UTC)
    usual = own_history(records.store, fresh, policy, now)
    if policy.prolog.triage:
        from screener.prolog.triage import triage_policy

        short = own_history(records.store, fresh, triage_policy(policy), now)
        usual = {n: usual.get(n) or short.get(n, []) for n in fresh}
    return usual


def _fast_path(
    policy: Policy,
    job: SlurmJob,
    records: SlurmRecords | None,
    passed: dict[str, datetime],
    notes: dict[str, str],
    log: HookLog,
    beside: bool = False,
) -> None:
    """Log and record the nodes that joined the job on the fast path (so `accuracy` knows
    they joined it screened OK), with what their sentinel read (``notes``)."""
    pp = policy.prolog
    checked = ", sentinel as usual" + (" (beside the screen)" if beside else "") if notes else ""
    log(f"fast path: {fold_nodes(list(passed))} passed within {pp.fresh_s:g}s{checked}, not probed")
    if records is not None:
        records.record_fast_path(passed, job.job_id, datetime.now(UTC), pp.fresh_s, notes)


def _act(
    policy: Policy,
    job: SlurmJob,
    client: SlurmClient,
    records: SlurmRecords | None,
    result: ScreenResult,
    log: HookLog,
    left_s: float = 0.0,
) -> int:
    """Log the verdicts, then drain (guarded) what the stored run found slow: the exit code.
    A small allocation waits (at most ``fleet_wait_s`` and ``left_s``) for concurrent runs'
    first rounds before the fleet judges it."""
    from screener.hooks import drains
    from screener.probe_data import Trigger

    for v in result.summary.verdicts:
        log(f"{v.node}: {v.status.value} {v.reason}")
    if records is None or result.store_error:
        slow = [v.node for v in drainable(result.summary, policy.verdict.confirm)]
        if slow:
            log(f"not draining {fold_nodes(slow)}: the database does not hold this run")
        return _fail(policy, log, f"job {job.job_id}: {result.store_error or 'no database'}")
    now = datetime.now(UTC)
    drains.close_passing(result.summary, records, now, result.run_id)
    todo = drainable(result.summary, policy.verdict.confirm)
    if not todo and not result.summary.shared_cause:
        return 0  # nothing to drain nor to record: no need to ask Slurm for the partition
    # A shared cause is recorded even when nothing is drained (the shared-cause alert);
    # the partition is read only when there is something to drain (the guard needs it).
    partition = (
        [n.name for n in client.nodes() if not job.partition or job.partition in n.partitions]
        if todo
        else []
    )
    if todo and small_allocation(len(job.nodes), policy.slurm):
        wait = max(0.0, min(policy.slurm.fleet_wait_s, left_s))
        drains.await_fleet(records, partition, result.run_id, policy, now, wait, log)
    # Under the actions lock, so the partition guard counts concurrent prologs' drains; with
    # SIGTERM held, so a drain and its record go together (PrologEpilogTimeout).
    with drains.acting(records):
        plan = drains.decide_drains(
            result.summary,
            result.run_id,
            len(job.nodes),
            partition,
            records,
            policy,
            now,
            allocated=job.nodes,
        )
        with _deferred_sigterm():
            drained = drains.apply_drains(
                plan,
                client,
                records,
                result.run_id,
                Trigger.PROLOG,
                job.job_id,
                now,
                policy.slurm.dry_run,
                log,
            )
    return EXIT_REQUEUE if drained else 0


@contextmanager
def _deferred_sigterm() -> Iterator[None]:
    """Hold SIGTERM while Slurm is changed and the change recorded; it is delivered after.
    (SIGKILL cannot be held: the next run reconciles pending drains.)"""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _devices(result: ScreenResult) -> dict[str, str]:
    """Each probed node's scratch device (in-job iostat then needs no facts round)."""
    return {n: p.facts.device for n, p in result.probes.items() if p.facts and p.facts.device}


def _iostat_later(policy: Policy, job: SlurmJob, devices: Mapping[str, str], log: HookLog) -> bool:
    """Under hookd, start in-job iostat after the exit code is out (the job does not wait
    for it), holding the job's lock so its epilog stops it only once it runs. False: start
    it now (in its own process, or no lock file could be made)."""
    from screener.hooks import later

    if not later.can_defer():
        return False
    lock = later.JobLock.take(policy.store.spool_dir, job.job_id)
    if lock is None:
        log(f"in-job iostat starts before the exit: no lock in {policy.store.spool_dir}")
        return False

    def start() -> None:
        try:
            asyncio.run(_iostat_only(policy, job, log, devices))
        finally:
            lock.release()

    later.defer(start)
    log("in-job iostat starts once Slurm has the exit code (screener hookd)")
    return True


def _iostat_now_or_later(policy: Policy, job: SlurmJob, log: HookLog) -> None:
    """In-job iostat on nodes no screen connected to: deferred under hookd, else now."""
    if not _iostat_later(policy, job, {}, log):
        asyncio.run(_iostat_only(policy, job, log))


async def _iostat_only(
    policy: Policy, job: SlurmJob, log: HookLog, devices: Mapping[str, str] | None = None
) -> None:
    """Start in-job iostat on connections of its own (``devices``: those already known)."""
    from screener.app import make_transport
    from screener.hooks.start_iostat import start_job_iostat

    transport = make_transport(policy.transport)
    try:
        await start_job_iostat(transport, job, devices or {}, policy, log)
    finally:
        await transport.close()


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
