"""The prolog's executor: it runs each step plan.py decides and feeds the result back.

``run`` reads top to bottom as one prolog: what the store knows of the job's nodes (once a
killed run's drains are settled), the opening (fast path, sentinels first or beside),
the first screen (a triage or the full probe), what the sentinels beside it said, a second
short look at what a triage passed unusually low, and the full probe of what a screen left
in doubt, or "no budget left". Each screen goes through
``app.run_screen`` like `screener screen`; once its verdicts are in, its after-step
(``_AfterScreen``, in the screen's event loop, over its connections) acts on the stored run
(verdict lines, drains behind the guard, SIGTERM held while Slurm changes) and starts in-job
iostat unless a full probe follows. Every side effect goes through the ``Context``; the
budget only through its ``Deadline``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TypeVar

from screener.app import ScreenRequest, ScreenResult, make_transport, run_screen
from screener.errors import StoreError
from screener.hooks import drains, later
from screener.hooks.drain_rules import drainable, small_allocation
from screener.hooks.log import HookLog
from screener.hooks.start_iostat import start_job_iostat
from screener.hostlist import fold_nodes
from screener.policy import Policy
from screener.probe.fio import recipe_fingerprint
from screener.probe.sentinel import SentinelResult
from screener.probe.short import triage_policy
from screener.probe_data import Trigger
from screener.prolog import plan
from screener.prolog.plan import EXIT_REQUEUE, Deadline, Known
from screener.prolog.sentinel import (
    SentinelsBeside,
    own_dd_readings,
    record_dd,
    sentinel_then_iostat,
    usual_reads,
)
from screener.slurm.client import SlurmClient, SlurmJob
from screener.spool import SPOOLED_NOTE, SpooledDrains, run_path
from screener.store import Store
from screener.store.locks import ACTIONS_WAIT_S
from screener.store.slurm_records import SlurmRecords
from screener.transport.base import RUN_TAG, Prepares, Transport

_T = TypeVar("_T")
OUTAGE_LOCK_WAIT_S = 10.0  # concurrent prologs' outage drains: a few scontrol calls each


@dataclass(frozen=True)
class Context:
    """What one prolog acts through: its policy and job, the Slurm client, the store (None:
    ``unavailable`` says why, results go to the spool), the hook's log, its budget, and
    ``fail`` (hook._fail: an error's exit code, open or closed, said in the log)."""

    policy: Policy
    job: SlurmJob
    client: SlurmClient
    store: Store | None
    unavailable: str | None
    log: HookLog
    deadline: Deadline
    fail: Callable[[str], int]

    @cached_property
    def records(self) -> SlurmRecords | None:
        """The Slurm bookkeeping in the store (episodes, passes, drains), when there is one."""
        return SlurmRecords(self.store) if self.store is not None else None

    def left(self) -> float:
        """Seconds of the budget a screen may still take."""
        return self.deadline.left(time.monotonic())

    def lock_wait(self, share: float = 1.0) -> float:
        """How long to wait on the actions lock: ``share`` of the budget left, 1 s to 60 s."""
        return max(1.0, min(ACTIONS_WAIT_S, self.left() * share))

    def say(self, lines: Iterable[str]) -> None:
        """Log each of ``lines`` (a decision's reasons), in order."""
        for line in lines:
            self.log(line)


def run(ctx: Context) -> int:
    """Screen a selected job: its exit code (EXIT_REQUEUE when a screen drained, or
    ``fail_closed`` and a screen's run could not be stored)."""
    opened = asyncio.run(_open(ctx))
    ctx, known, opening = opened.ctx, opened.known, opened.opening
    fast, probe, iostat_started = opening.fast, opening.probe, False
    earlier: Mapping[str, float] = {}  # what failed sentinels read: round 1 may decide
    failed: tuple[str, ...] = ()  # fresh, but their sentinel failed: no references
    if opened.sentinels is not None:  # every node fresh: their sentinels read first
        checked = plan.after_sentinels(opened.sentinels, known, len(ctx.job.nodes), ctx.policy)
        ctx.say(checked.said)
        record_dd(ctx.policy, ctx.records, opened.sentinels, ctx.log)
        ctx.say(checked.lines)
        fast, probe, earlier = checked.fast, checked.probe, checked.earlier
        failed = checked.failed
        iostat_started = ctx.policy.prolog.iostat and not checked.probe and opened.inline
    if fast is not None:
        _fast_path(ctx, fast)
    if not probe:
        if ctx.policy.prolog.iostat and not iostat_started:
            _iostat_now_or_later(ctx)
        return 0
    beside = _sentinels_beside(ctx, opening.sentinels) if opening.beside else None
    first = plan.first_screen(probe, known, len(ctx.job.nodes), ctx.policy, ctx.left(), failed)
    ctx.say(first.lines)
    screened = _screen(ctx, first, beside, earlier)
    if beside is not None:
        _after_beside(ctx, known, beside)
    codes = [screened.code]
    if screened.doubt is not None and screened.code == 0:
        codes.append(_settle(ctx, screened.doubt, first))
    return plan.exit_code(codes)


def _settle(ctx: Context, doubt: plan.Doubt, first: plan.Screen) -> int:
    """What ``first`` left in doubt: a second short look at the nodes it passed low, when the
    budget holds it and the full probe after it; then the full probe of what is still in
    doubt (its exit code)."""
    look = plan.second_look(doubt, first, ctx.policy, ctx.left())
    if look is None or look.screen is None:
        return _escalate(ctx, doubt, first)
    ctx.say(look.lines)
    looked = _screen(ctx, look.screen)
    if looked.code != 0 or looked.doubt is None:
        return looked.code
    return plan.exit_code([looked.code, _escalate(ctx, looked.doubt, look.screen)])


@dataclass(frozen=True)
class _Opened:
    """The opening as ``_open`` found it: the context (without its store if the store failed
    to answer), what the store knows, the plan's opening and, every node fresh, what their
    sentinels read (``inline``: in-job iostat was theirs to start, no hookd to defer to)."""

    ctx: Context
    known: Known
    opening: plan.Opening
    sentinels: list[SentinelResult] | None = None
    inline: bool = False


async def _open(ctx: Context) -> _Opened:
    """What the store knows, the opening and, every node fresh, their sentinels, in one
    event loop. When the store's first answer says every node is fresh, the SSH connections
    to them open while it goes on answering (issue 44: on the fast path 8 connects took
    0.15-0.2 s, after the store's ~0.06 s); otherwise none opens here: a screen opens its
    own, in its own loop (connects opened for it here cost a triage 0.05-0.08 s)."""
    transport = None
    if await _in_thread(lambda: _all_fresh(ctx)):
        transport = make_transport(ctx.policy.transport)
        if isinstance(transport, Prepares):
            transport.prepare(ctx.job.nodes)
    try:
        ctx, known = await _in_thread(lambda: _known_or_nothing(ctx))
        opening = plan.opening(ctx.job.nodes, known, ctx.policy)
        ctx.say(opening.lines)
        if not opening.sentinels or opening.beside:
            return _Opened(ctx, known, opening)
        records = ctx.records
        assert records is not None  # sentinels need a store
        if transport is None:  # fresh now, not at the first answer (a pass recorded since)
            transport = make_transport(ctx.policy.transport)
        fresh = list(opening.sentinels)
        usual, dd_usual = await _in_thread(
            lambda: (
                usual_reads(ctx.policy, records, fresh),
                own_dd_readings(ctx.policy, records, fresh),
            )
        )
        inline = not later.can_defer()
        found = await sentinel_then_iostat(
            transport, ctx.policy, ctx.job, fresh, usual, ctx.log, inline, dd_usual
        )
        return _Opened(ctx, known, opening, found, inline)
    finally:
        if transport is not None:
            await transport.close()


async def _in_thread(fn: Callable[[], _T]) -> _T:
    """``fn()`` in a daemon thread while the loop goes on (the connects): not the loop's
    executor, which asyncio.run would wait for on SIGTERM (a store call bounded only by the
    store's limits); the hook exits at once, as when the call ran in the main thread (a
    result that comes after the loop closed is dropped: asyncio.wrap_future)."""
    result: concurrent.futures.Future[_T] = concurrent.futures.Future()

    def work() -> None:
        try:
            result.set_result(fn())
        except BaseException as exc:  # raised in the caller
            result.set_exception(exc)

    threading.Thread(target=work, name="prolog-store", daemon=True).start()
    return await asyncio.wrap_future(result)


def _known_or_nothing(ctx: Context) -> tuple[Context, Known]:
    """``_known``; a store that answered the open, then not (a burst took its connections),
    sends the results to the spool: the context without its store, nothing known."""
    try:
        return ctx, _known(ctx)
    except StoreError as exc:
        ctx.log(f"job {ctx.job.job_id}: database unavailable ({exc}): results go to the spool")
        return replace(ctx, store=None, unavailable=str(exc)), Known.nothing(datetime.now(UTC))


def _all_fresh(ctx: Context) -> bool:
    """Would every node's sentinel read first, by the store's verdicts as they stand (before
    a killed run's drains are settled, which ``_known`` does)? False on any store error:
    ``_known`` says it."""
    if ctx.records is None or not ctx.policy.prolog.sentinel:
        return False
    try:
        opening = plan.opening(ctx.job.nodes, _standing(ctx, datetime.now(UTC)), ctx.policy)
    except StoreError:
        return False
    return bool(opening.sentinels) and not opening.beside


def _known(ctx: Context) -> Known:
    """What the store says of the job's nodes, once the drains of a killed run are settled;
    nothing without a database."""
    now = datetime.now(UTC)
    records = ctx.records
    if records is None:
        return Known.nothing(now)
    # A killed run's drains, waiting on the actions lock at most a quarter of what is left
    wait = ctx.lock_wait(0.25)
    drains.finish_pending(ctx.client, records, now, ctx.log, nodes=ctx.job.nodes, wait_s=wait)
    return _standing(ctx, now)


def _standing(ctx: Context, now: datetime) -> Known:
    """The store's latest verdicts and flaky episodes of the job's nodes, at ``now``."""
    records = ctx.records
    assert records is not None
    pp, nodes = ctx.policy.prolog, ctx.job.nodes
    # what the full probe said last (with triage on): a triage's own doubt is re-triaged
    short = recipe_fingerprint(triage_policy(ctx.policy).probe) if pp.triage else None
    every, latest = records.latest_verdicts_apart(nodes, short)
    flaky = records.flaky_since(nodes, now - timedelta(seconds=pp.flaky_window_s))
    return Known.from_store(every, latest, flaky, now)


def _sentinels_beside(ctx: Context, fresh: tuple[str, ...]) -> SentinelsBeside:
    """The fresh nodes' sentinels, to read beside the screen of the others (issue 22)."""
    records = ctx.records
    assert records is not None  # plan.opening reads sentinels only with a store
    usual = usual_reads(ctx.policy, records, list(fresh))
    dd_usual = own_dd_readings(ctx.policy, records, list(fresh))
    return SentinelsBeside(ctx.policy, fresh, usual, dd_usual)


def _after_beside(ctx: Context, known: Known, beside: SentinelsBeside) -> None:
    """Log and record the sentinels that read beside the screen: the passed ones took the
    fast path; the failed ones were screened after it (or, no budget, said so)."""
    checked = plan.after_beside(beside.results, known, ctx.policy)
    ctx.say(checked.said)
    record_dd(ctx.policy, ctx.records, beside.results, ctx.log)
    if checked.fast is not None:
        _fast_path(ctx, checked.fast)


def _escalate(ctx: Context, doubt: plan.Doubt, first: plan.Screen) -> int:
    """The full probe of what ``first`` left in doubt, when the budget still holds it (its
    exit code); else in-job iostat, which waited for it, starts now."""
    step = plan.escalation(doubt, first, ctx.policy, ctx.left())
    ctx.say(step.lines)
    if step.screen is not None:
        return _screen(ctx, step.screen).code
    if ctx.policy.prolog.iostat:
        _iostat_now_or_later(ctx)
    return 0


def _fast_path(ctx: Context, fast: plan.FastPath) -> None:
    """Log and record the nodes that joined the job on the fast path (so `accuracy` knows
    they joined it screened OK), with what their sentinel read."""
    ctx.log(fast.line)
    if ctx.records is not None:
        at, fresh_s = datetime.now(UTC), ctx.policy.prolog.fresh_s
        ctx.records.record_fast_path(dict(fast.passed), ctx.job.job_id, at, fresh_s, fast.notes)


def _screen(
    ctx: Context,
    screen: plan.Screen,
    beside: SentinelsBeside | None = None,
    earlier: Mapping[str, float] | None = None,
) -> _AfterScreen:
    """Run ``screen`` within the budget left (``beside``: sentinels reading meanwhile;
    ``earlier``: what failed sentinels read): its after-step, with the outcome."""
    after = _AfterScreen(ctx, screen, beside)
    request = ScreenRequest(
        nodes=tuple(screen.nodes),
        policy=screen.policy,
        trigger=Trigger.PROLOG,
        job_id=ctx.job.job_id,
        deadline_s=max(ctx.left(), 0.1),
        store=ctx.store,
        db_unavailable=ctx.unavailable,
        after=after,
        run_info=screen.run_info,
        beside=beside,
        earlier=earlier,
        history_also=screen.history_also,
        spare=plan.spare(screen, ctx.policy),
    )
    run_screen(request)
    return after


@dataclass
class _AfterScreen:
    """A screen's after-step, run once its verdicts are in: act on the stored run (``code``),
    and when it is stored and drained nobody, what it leaves for the full probe (``doubt``);
    in-job iostat starts when nothing follows (over the screen's connections, or after the
    exit code under hookd)."""

    ctx: Context
    screen: plan.Screen
    beside: SentinelsBeside | None
    code: int = 0
    doubt: plan.Doubt | None = None
    stopped: bool = False  # a dry run stopped where a live prolog would requeue the job

    async def __call__(self, transport: Transport, result: ScreenResult) -> None:
        ctx = self.ctx
        ctx.say(result.notes)  # planted names moved aside (screener.probe.private)
        failed = self.beside.failed() if self.beside is not None else []
        self.code, self.stopped = _act(ctx, result, ctx.left())
        if self.code or self.stopped:
            ctx.say(plan.unreprobed_lines(result.summary, result.reprobed))
        if self.stopped:
            ctx.log("dry run: a live prolog would requeue the job here; no further screen")
        elif self.code == 0 and ctx.records is not None and not result.store_error:
            ctx.say(plan.usual_lines(result.summary, self.screen, ctx.policy, result.reprobed))
            self.doubt = plan.after_screen(
                result.summary, result.reprobed, self.screen, failed, ctx.policy
            )
        if self.code == 0 and self.doubt is None and ctx.policy.prolog.iostat:
            devices = _devices(result)
            if not _iostat_later(ctx, devices):
                await start_job_iostat(transport, ctx.job, devices, ctx.policy, ctx.log)


def _act(ctx: Context, result: ScreenResult, left_s: float) -> tuple[int, bool]:
    """Log the verdicts, then drain (guarded) what the stored run found slow: the exit code,
    and whether a dry run would have drained (recorded as ``would_drain``): it stops there,
    as the live prolog does (issue 44: a dry run that went on scored a second look's drain
    by the full probe after it). A small allocation waits (at most ``fleet_wait_s`` and
    ``left_s``) for concurrent runs' first rounds before the fleet judges it."""
    policy, job, log, records = ctx.policy, ctx.job, ctx.log, ctx.records
    summary, run_id = result.summary, result.run_id
    for v in summary.verdicts:
        log(f"{v.node}: {v.status.value} {v.reason}")
    if records is None or result.store_error:
        journal = _spooled_run(ctx, result)
        drained = _act_in_outage(ctx, result, journal, left_s) if journal is not None else None
        if drained:
            return EXIT_REQUEUE, False
        slow = [v.node for v in drainable(summary, policy.verdict.confirm)]
        if slow and drained is None:
            log(f"not draining {fold_nodes(slow)}: the run is neither stored nor spooled")
        return ctx.fail(f"job {job.job_id}: {result.store_error or 'no database'}"), False
    now = datetime.now(UTC)
    drains.close_passing(summary, records, now, run_id)
    todo = drainable(summary, policy.verdict.confirm)
    if not todo and not summary.shared_cause:
        return 0, False  # nothing to drain nor to record: no need to ask Slurm for the partition
    # A shared cause is recorded even when nothing is drained (the shared-cause alert);
    # the partition is read only when there is something to drain (the guard needs it).
    partition = _partition(ctx) if todo else []
    if todo and small_allocation(len(job.nodes), policy.slurm):
        wait = max(0.0, min(policy.slurm.fleet_wait_s, left_s))
        drains.await_fleet(records, partition, run_id, policy, now, wait, log)
    # Under the actions lock, so the partition guard counts concurrent prologs' drains; with
    # SIGTERM held, so a drain and its record go together (PrologEpilogTimeout).
    with drains.acting(records, ctx.lock_wait()):
        chosen = drains.decide_drains(
            summary, run_id, len(job.nodes), partition, records, policy, now, allocated=job.nodes
        )
        dry_run = policy.slurm.dry_run
        by = drains.DrainContext(
            ctx.client, records, run_id, Trigger.PROLOG, job.job_id, now, dry_run, log
        )
        with _deferred_sigterm():
            drained = drains.apply_drains(chosen, by)
    return (EXIT_REQUEUE if drained else 0), dry_run and bool(chosen.drain)


def _spooled_run(ctx: Context, result: ScreenResult) -> SpooledDrains | None:
    """The journal of this run's spool file, when the run went there whole (the database
    did not answer, and nothing was lost): drains made now are replayed with it."""
    tag = RUN_TAG.get()  # set by the screen's event loop, which runs this after-step
    if tag is None or not result.store_error or SPOOLED_NOTE not in result.store_error:
        return None
    path = run_path(ctx.policy.store.spool_dir, tag)
    return SpooledDrains(path, Trigger.PROLOG, ctx.job.job_id) if path.is_file() else None


def _act_in_outage(
    ctx: Context, result: ScreenResult, journal: SpooledDrains, left_s: float
) -> list[str]:
    """Drain what the spooled run found slow, the guard counting from Slurm (issue 45)."""
    policy = ctx.policy
    if not drainable(result.summary, policy.verdict.confirm) and not result.summary.shared_cause:
        return []
    part = ctx.job.partition
    by = drains.Outage(
        ctx.client,
        lambda: [n for n in ctx.client.nodes() if not part or part in n.partitions],
        journal,
        policy.store.spool_dir,
        max(1.0, min(OUTAGE_LOCK_WAIT_S, left_s)),
        policy.slurm.dry_run,
        ctx.log,
    )
    with _deferred_sigterm():  # a drain and its journal line go together
        return drains.drain_in_outage(result.summary, ctx.job.nodes, policy, datetime.now(UTC), by)


def _partition(ctx: Context) -> list[str]:
    """The nodes of the job's partition (all, when it names none): the guard's count."""
    part = ctx.job.partition
    return [n.name for n in ctx.client.nodes() if not part or part in n.partitions]


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


def _iostat_later(ctx: Context, devices: Mapping[str, str]) -> bool:
    """Under hookd, start in-job iostat after the exit code is out (the job does not wait
    for it), holding the job's lock so its epilog stops it only once it runs. False: start
    it now (in its own process, or no lock file could be made)."""
    if not later.can_defer():
        return False
    spool = ctx.policy.store.spool_dir
    lock = later.JobLock.take(spool, ctx.job.job_id)
    if lock is None:
        ctx.log(f"in-job iostat starts before the exit: no lock in {spool}")
        return False

    def start() -> None:
        try:
            asyncio.run(_iostat_only(ctx, devices))
        finally:
            lock.release()

    later.defer(start)
    ctx.log("in-job iostat starts once Slurm has the exit code (screener hookd)")
    return True


def _iostat_now_or_later(ctx: Context) -> None:
    """In-job iostat on nodes no screen connected to: deferred under hookd, else now."""
    if not _iostat_later(ctx, {}):
        asyncio.run(_iostat_only(ctx))


async def _iostat_only(ctx: Context, devices: Mapping[str, str] | None = None) -> None:
    """Start in-job iostat on connections of its own (``devices``: those already known)."""
    transport = make_transport(ctx.policy.transport)
    try:
        await start_job_iostat(transport, ctx.job, devices or {}, ctx.policy, ctx.log)
    finally:
        await transport.close()
