"""The screening pipeline: probe every node in parallel, judge, re-probe suspects, store.

Per node (one SSH connection, reused): preflight and facts, then fio with an iostat
monitor beside it. Any error on a node makes that node UNKNOWN; it never stops the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from screener.errors import ProbeError, ScreenerError, StoreError, TransportError
from screener.policy import Policy, ProbePolicy
from screener.probe.facts import facts_argv, parse_facts
from screener.probe.fio import (
    cleanup_argv,
    fio_argv,
    layout_argv,
    layout_timeout_s,
    parse_fio,
    policy_jobs,
    probe_duration_s,
    recipe_fingerprint,
)
from screener.probe.iostat import iostat_argv, iostat_count, parse_iostat
from screener.probe.preflight import parse_preflight, preflight_argv
from screener.probe_data import FleetFigure, IostatSample, NodeFacts, NodeProbe, RunSummary, Trigger
from screener.steady import annotate, deep_rounds
from screener.transport.base import CommandResult, Transport, check
from screener.verdict.confirm import confirm_jobs, decided, decisive, unspared
from screener.verdict.judge import confirm, evaluate, judge_round2, references, suspects
from screener.verdict.rules import borderline_level

if TYPE_CHECKING:
    from screener.store import Store


class Clock(Protocol):
    """Wall clock, passed in so runs can be timestamped deterministically in tests."""

    def now(self) -> datetime: ...


class SystemClock:
    """The real UTC clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class RunStore(Protocol):
    """What the pipeline needs from the store (screener.store.Store satisfies it)."""

    def start_run(
        self,
        trigger: Trigger,
        nodes: Sequence[str],
        policy: dict[str, object],
        job_id: str | None,
        nodeset: str,
        started_at: datetime,
    ) -> int: ...

    def record_probe(self, run_id: int, probe: NodeProbe, round_no: int) -> None: ...

    def record_verdicts(self, run_id: int, summary: RunSummary) -> None: ...

    def finish_run(self, run_id: int, finished_at: datetime, status: str = "done") -> None: ...

    def read_histories(
        self,
        nodes: Sequence[str],
        limit: int,
        recipe: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, list[float]]: ...

    def read_fleet(
        self, exclude: Sequence[str], recipe: str | None, since: datetime, limit: int
    ) -> list[FleetFigure]: ...


class ProbeLocks(Protocol):
    """Per-node probe locks across processes (screener.store.locks.NodeLocks): ``hold``
    yields None while the node is ours, or the run holding it ("run 7") when the wait ran
    out. ``holder`` names this run to the others."""

    holder: str

    def hold(self, node: str, stop_at: float | None) -> AbstractAsyncContextManager[str | None]: ...


NodeDone = Callable[[int, NodeProbe], None]  # (round, probe) -> None, for progress bars
BetweenRounds = Callable[[RunSummary], Awaitable[None]]
# Round 1's suspects the caller settles itself, by round 1's verdicts: not re-probed when
# DEGRADED (verdict.confirm.unspared).
Spare = Callable[[RunSummary], Collection[str]]


@dataclass(frozen=True)
class ScreenResult:
    """What a screen produced: the final summary plus the probes behind it."""

    run_id: int | None
    summary: RunSummary
    probes: dict[str, NodeProbe]  # the last probe of each node (round 2 for suspects)
    rounds: int
    wall_s: float
    reprobed: tuple[str, ...] = field(default_factory=tuple)
    round_longest_s: tuple[float, ...] = ()  # per round, the longest single-node probe
    store_error: str | None = None  # set when the run could not be (fully) stored
    notes: tuple[str, ...] = ()  # what the nodes reported beside figures (planted names)

    @property
    def longest_probe_s(self) -> float:
        """Time the slowest node kept each round busy, summed over rounds."""
        return sum(self.round_longest_s)

    @property
    def overhead_s(self) -> float:
        """Wall time not spent waiting for the slowest node: fan-out, deciding, storing."""
        return self.wall_s - self.longest_probe_s


def _ok(res: CommandResult, what: str) -> CommandResult:
    """``check`` for probe steps: a non-zero exit is a ProbeError naming the step."""
    try:
        return check(res)
    except TransportError as exc:
        raise ProbeError(res.host, f"{what}: {exc.message}") from None


async def _facts(transport: Transport, node: str, policy: Policy) -> NodeFacts | None:
    """Facts are explanations, not evidence: failing to get them never fails the node."""
    try:
        res = await transport.run(
            node, facts_argv(policy.probe.target), timeout=policy.transport.command_timeout_s
        )
        return parse_facts(res.stdout, node)
    except (ProbeError, TransportError):
        return None


async def probe_node(
    transport: Transport, node: str, policy: Policy, jobs: Sequence[str] | None = None
) -> NodeProbe:
    """Run preflight, facts, fio and iostat on one node; errors become an UNKNOWN probe.
    ``jobs``: a subset of the recipe's (a confirmation round's); the probe keeps the
    recipe's fingerprint, as each figure is measured the recipe's way."""
    t0 = time.monotonic()
    pp = policy.probe
    jobs = tuple(jobs) if jobs is not None else policy_jobs(pp)
    slack = policy.transport.command_timeout_s
    facts: NodeFacts | None = None  # kept on failure: evidence already collected
    samples: tuple[IostatSample, ...] = ()
    raw_iostat = ""
    try:
        pre_res, facts = await asyncio.gather(
            transport.run(node, preflight_argv(pp.target), timeout=slack),
            _facts(transport, node, policy) if pp.facts else _none(),
        )
        pre = parse_preflight(pre_res.stdout, pre_res.exit_status, node, pp)
        if pre.probe_file_mib < pp.size_mib:
            # First probe on this node: write the region once, outside the timed window.
            lay = await transport.run(node, layout_argv(pp), timeout=layout_timeout_s(pp, slack))
            _ok(lay, "fio layout")
        expected = probe_duration_s(pp, jobs)
        fio_task = transport.run(node, fio_argv(pp, jobs), timeout=expected + slack)
        mon: Awaitable[CommandResult | None]
        if not pre.iostat or facts is None or not facts.device:
            mon = _none()  # the target's device only, or nothing: another disk proves nothing
        else:
            mon = transport.run(
                node,
                iostat_argv(
                    pp.iostat_interval_s,
                    iostat_count(expected, pp.iostat_interval_s),
                    [facts.device],
                ),
                timeout=expected + slack,
            )
        fio_res, io_res = await asyncio.gather(fio_task, mon, return_exceptions=True)
        samples, raw_iostat = _monitor(io_res, node)  # kept even if fio failed: evidence
        if isinstance(fio_res, BaseException):
            raise fio_res
        try:
            run = parse_fio(fio_res.stdout, node)
        except ProbeError:
            if "{" not in fio_res.stdout:
                _ok(fio_res, "fio")  # no JSON at all: fio's stderr says why
            raise
        _ok(fio_res, "fio")
        if missing := [j for j in jobs if run.job(j) is None]:
            raise ProbeError(node, f"fio output lacks job {missing[0]!r}")
        return NodeProbe.from_fio(
            node,
            run,
            fio_res.stdout,
            iostat=samples,
            raw_iostat=raw_iostat,
            facts=facts,
            duration_s=time.monotonic() - t0,
            recipe=recipe_fingerprint(pp),
            notes=pre.notes,
        )
    except TransportError as exc:
        kind, message = exc.kind, str(exc)
    except ProbeError as exc:
        kind, message = "probe", str(exc)
    except Exception as exc:  # one node's surprise must not abort the whole fleet
        kind, message = "internal", f"{node}: internal error: {exc!r}"
    return NodeProbe(
        node=node,
        error=message,
        error_kind=kind,
        duration_s=time.monotonic() - t0,
        facts=facts,
        iostat=samples,
        raw_iostat=raw_iostat,
        recipe=recipe_fingerprint(pp),
    )


def _monitor(
    res: CommandResult | BaseException | None, node: str
) -> tuple[tuple[IostatSample, ...], str]:
    """iostat samples and raw text; monitoring is supporting evidence, so losing it is fine.

    The exit status is not checked: iostat cut short by a signal still printed every
    complete interval, and parse_iostat keeps those.
    """
    if not isinstance(res, CommandResult):
        return (), ""
    try:
        return parse_iostat(res.stdout, node), res.stdout
    except ProbeError:
        return (), res.stdout


async def _none() -> None:
    return None


@dataclass(frozen=True)
class Rounds:
    """One node's probes in one screen round: one, or in deep mode several until steady
    state (the last is judged), and whether they settled (None outside deep mode)."""

    probes: tuple[NodeProbe, ...]
    steady: bool | None = None

    @property
    def last(self) -> NodeProbe:
        """The probe the verdict judges."""
        return self.probes[-1]


class Prober(Protocol):
    """Probes nodes for one screen round (1: all, 2: suspects beside references) and
    removes the probe files after the last one. TransportProber is the default; the sweep
    adds a Slurm step for the nodes its job holds (sweep.step.StepProber)."""

    async def probe(
        self,
        nodes: Sequence[str],
        round_no: int,
        stop_at: float | None,
        jobs: Sequence[str] | None = None,
    ) -> dict[str, Rounds]: ...

    async def cleanup(self, nodes: Sequence[str]) -> None: ...


class TransportProber:
    """Probes over the transport (SSH, or this host); ``deep`` repeats each node's probe
    until steady state (screener.steady)."""

    def __init__(
        self,
        transport: Transport,
        policy: Policy,
        on_done: NodeDone | None = None,
        locks: ProbeLocks | None = None,
        deep: bool = False,
    ) -> None:
        self.transport = transport
        self.policy = policy
        self.on_done = on_done
        self.locks = locks
        self.deep = deep

    async def probe(
        self,
        nodes: Sequence[str],
        round_no: int,
        stop_at: float | None,
        jobs: Sequence[str] | None = None,
    ) -> dict[str, Rounds]:
        got = await probe_all_rounds(
            self.transport,
            nodes,
            self.policy,
            round_no,
            self.on_done,
            stop_at,
            self.locks,
            self.deep,
            jobs,
        )
        return {r.last.node: r for r in got}

    async def cleanup(self, nodes: Sequence[str]) -> None:
        await remove_probe_files(self.transport, nodes, self.policy)


async def probe_all_rounds(
    transport: Transport,
    nodes: Sequence[str],
    policy: Policy,
    round_no: int,
    on_done: NodeDone | None = None,
    stop_at: float | None = None,
    locks: ProbeLocks | None = None,
    deep: bool = False,
    jobs: Sequence[str] | None = None,
) -> list[Rounds]:
    """Probe every node in parallel, order kept; ``deep``: rounds until steady state;
    ``jobs``: the fio jobs to run (default: the recipe's).

    The transport bounds *commands* by ``concurrency``; a node runs two at once (fio and
    its iostat monitor), so at most half as many nodes start together. Otherwise fio
    commands could fill every slot and each iostat would only start after its fio ended.
    ``stop_at`` (time.monotonic()) is the screen's deadline: a node not done by then is
    UNKNOWN (error kind "deadline"), never SLOW. With ``locks`` a node another run is
    probing is waited for (within the deadline), else UNKNOWN "busy: probed by run N".
    """
    gate = asyncio.Semaphore(max(1, policy.transport.concurrency // 2))

    async def once(node: str) -> NodeProbe:
        p = await probe_node(transport, node, policy, jobs)
        if on_done is not None:
            on_done(round_no, p)
        return p

    async def rounds(node: str) -> Rounds:
        if not deep:
            return Rounds((await once(node),))
        got, steady = await deep_rounds(lambda: once(node), policy.sweep)
        return Rounds(tuple(got), steady)

    async def bounded(node: str) -> Rounds:
        if stop_at is None:
            return await rounds(node)
        t0 = time.monotonic()
        try:
            async with asyncio.timeout_at(_loop_time(stop_at)):
                return await rounds(node)
        except TimeoutError:
            p = NodeProbe(
                node=node,
                error=f"{node}: screen deadline reached",
                error_kind="deadline",
                duration_s=time.monotonic() - t0,
                recipe=recipe_fingerprint(policy.probe),
            )
            if on_done is not None:
                on_done(round_no, p)
            return Rounds((p,), False if deep else None)

    async def gated(node: str) -> Rounds:
        async with gate:
            return await bounded(node)

    async def one(node: str) -> Rounds:
        if locks is None:
            return await gated(node)
        async with locks.hold(node, stop_at) as busy:
            if busy is None:
                return await gated(node)
            p = _busy(node, busy, policy)
            if on_done is not None:
                on_done(round_no, p)
            return Rounds((p,), False if deep else None)

    return list(await asyncio.gather(*(one(n) for n in nodes)))


def _busy(node: str, holder: str, policy: Policy) -> NodeProbe:
    """A node another run kept probing past our wait: UNKNOWN, never judged or drained."""
    error = f"{node}: busy: probed by {holder}"
    return NodeProbe(
        node=node, error=error, error_kind="busy", recipe=recipe_fingerprint(policy.probe)
    )


def _loop_time(stop_at: float) -> float:
    """A time.monotonic() instant in the running loop's clock (asyncio.timeout_at's)."""
    return asyncio.get_running_loop().time() + (stop_at - time.monotonic())


# Runs inside the screen's event loop once the verdicts are in, with the same transport (its
# SSH connections still open) and under the same SIGTERM handling: the prolog's drains and
# in-job iostat start.
AfterScreen = Callable[[Transport, ScreenResult], Awaitable[None]]
# Builds the run's prober from its transport and node locks (the sweep's Slurm step);
# None: TransportProber.
MakeProber = Callable[[Transport, ProbeLocks | None], Prober]
# Runs beside the screen, in its event loop and over its transport, and is awaited before
# the after-step: the prolog's sentinels of a job's fresh nodes while the others are
# probed. It must not raise (its own failures are its results).
Beside = Callable[[Transport], Awaitable[None]]


@dataclass(frozen=True)
class ScreenRequest:
    """One screen as its caller asks for it, passed whole from app.run_screen through
    run.loop.run_loop to screen(), which add only what they make themselves (the run tag,
    the recorder, the transport, the node locks). Here because its field types are.

    ``nodes`` and ``policy`` are what is screened and how; the rest is optional:
    ``trigger``/``job_id``: why (stored with the run); ``store_results``: False stores and
    spools nothing; ``on_done``: called per probe (progress bars); ``between_rounds``:
    awaited between round 1 and the re-probe; ``deadline_s`` bounds the whole screen (both
    rounds): when it runs out the screen decides with what it has, and every node (or
    re-probe) not finished is UNKNOWN, never SLOW; ``store``: the caller's open store (left
    open), or ``db_unavailable``: why it could not open it (spool at once, no second connect
    timeout); ``after``, ``beside``: steps in the screen's event loop (AfterScreen, Beside);
    ``prober``: how nodes are probed (MakeProber; default: over the transport);
    ``run_info``: stored with the run's policy (e.g. the sweep's mode); ``history_also``:
    the recipes whose seq-read history a node without history of this one is compared with
    (store.history.past_figures); ``earlier``: node -> a read the caller took just before /
    its usual (the prolog's failed sentinel), a first window that lets round 1 decide
    (verdict.confirm.decisive); ``spare``: round 1's DEGRADED suspects the caller settles
    without a re-probe (the prolog's fresh references at their usual place).
    """

    nodes: tuple[str, ...]
    policy: Policy
    _: KW_ONLY
    trigger: Trigger = Trigger.MANUAL
    job_id: str | None = None
    store_results: bool = True
    on_done: NodeDone | None = None
    between_rounds: BetweenRounds | None = None
    deadline_s: float | None = None
    store: Store | None = None
    db_unavailable: str | None = None
    after: AfterScreen | None = None
    prober: MakeProber | None = None
    run_info: Mapping[str, object] | None = None
    beside: Beside | None = None
    history_also: tuple[ProbePolicy, ...] = ()
    earlier: Mapping[str, float] | None = None
    spare: Spare | None = None


async def screen(
    request: ScreenRequest,
    transport: Transport,
    store: RunStore | None,
    *,
    nodeset: str = "",
    clock: Clock | None = None,
    locks: ProbeLocks | None = None,
) -> ScreenResult:
    """Screen ``request.nodes``: probe, judge against peers and history, confirm suspects,
    record through ``store`` (the run's: the recorder, not ``request.store``).

    ``transport`` runs the probes (unless ``request.prober`` says otherwise) and ``locks``
    keeps other runs off the nodes; ``nodeset`` is the folded node list stored with the run.
    """
    nodes, policy = request.nodes, request.policy
    clock = clock or SystemClock()
    if request.prober is not None:
        prober = request.prober(transport, locks)
    else:
        prober = TransportProber(transport, policy, request.on_done, locks)
    t0 = time.monotonic()
    stop_at = None if request.deadline_s is None else t0 + request.deadline_s
    history: dict[str, list[float]] = {}
    tails: dict[str, list[tuple[float, float]]] = {}
    fleet: list[FleetFigure] = []
    rec = _Recorder(None, None)
    if store is not None:  # a store that fails here fails the screen: nothing measured yet
        # Imported here: screener.store loads SQLAlchemy and the ORM tables, 0.5-1.5 s more
        # (measured: `import screener.store.history` after screener.run.local, 5 runs on this
        # 2-core machine under load) for every `screener probe --local` task of a sweep step,
        # which imports this module and never reads history.
        from screener.store.history import past_figures, past_tails

        history, fleet = past_figures(store, nodes, policy, clock.now(), request.history_also)
        if policy.verdict.short_read:  # where each node's tail usually sits (judge.usual)
            tails = past_tails(store, nodes, policy, clock.now())
        stored = {**policy.to_dict(), **(request.run_info or {})}
        run_id = store.start_run(
            request.trigger, nodes, stored, request.job_id, nodeset or ",".join(nodes), clock.now()
        )
        rec = _Recorder(store, run_id)
        if locks is not None:
            locks.holder = f"run {run_id}"
    try:
        got = await prober.probe(nodes, 1, stop_at)
        first = [got[n].last for n in nodes]
        notes = [n for p in first for n in p.notes]
        deep = {n: r for n, r in got.items() if r.steady is not None}
        rec.rounds(got, 1)
        summary = evaluate(first, history, policy.verdict, fleet, tails=tails)
        final = {p.node: p for p in first}
        longest = [_longest(got)]
        again = suspects(summary) if policy.verdict.confirm else []
        usable = sum(1 for p in first if p.usable) if again else 0
        if again and (sure := decisive(summary, usable, policy.verdict, request.earlier, first)):
            summary = decided(summary, sure)
            again = [n for n in again if n not in sure]
        if again and request.spare is not None:
            again = unspared(again, summary, request.spare(summary))
        if again:
            if request.between_rounds is not None:
                await request.between_rounds(summary)
            refs = references(summary, policy.verdict.confirm_references)
            wanted = [*again, *refs]
            jobs = policy_jobs(policy.probe)
            if not policy.verdict.confirm_every_job:
                jobs = confirm_jobs(summary, again, jobs)
            got2 = await prober.probe(wanted, 2, stop_at, jobs)
            rec.rounds(got2, 1 + max(len(r.probes) for r in got.values()))
            second = [got2[n].last for n in wanted]
            notes.extend(n for p in second for n in p.notes if n not in notes)
            longest.append(_longest(got2))
            final.update({p.node: p for p in second if p.node in again})
            deep.update({n: got2[n] for n in again if got2[n].steady is not None})
            summary = confirm(
                summary,
                judge_round2(first, second, refs, history, fleet, policy.verdict, tails),
                refs,
                borderline_level(policy.verdict),
                policy.verdict.short_read,
            )
        if deep:  # after the judgement: whether each node settled explains, never decides
            window = policy.sweep.deep_window
            steady = {n: (r.probes, bool(r.steady)) for n, r in deep.items()}
            summary = annotate(summary, steady, window)
        if not policy.probe.keep_file:
            await prober.cleanup(nodes)
        rec.done(summary, clock.now())
    except BaseException:
        rec.failed(clock.now())
        raise
    return ScreenResult(
        run_id=rec.run_id,
        summary=summary,
        probes=final,
        rounds=len(longest),
        wall_s=time.monotonic() - t0,
        reprobed=tuple(again),
        round_longest_s=tuple(longest),
        store_error=str(rec.error) if rec.error else None,
        notes=tuple(notes),
    )


async def remove_probe_files(transport: Transport, nodes: Sequence[str], policy: Policy) -> None:
    """``[probe] keep_file = false``: remove the probe file after the last round (best
    effort: a node that fails here already has its verdict)."""

    async def one(node: str) -> None:
        with contextlib.suppress(ScreenerError):
            await transport.run(
                node, cleanup_argv(policy.probe), timeout=policy.transport.command_timeout_s
            )

    await asyncio.gather(*(one(n) for n in nodes))


class _Recorder:
    """Writes one run's results. A store failure mid-run is kept, not raised: the figures
    already measured must still reach the admin (printed, with the error) and not be lost.
    After the first failure nothing more is written."""

    def __init__(self, store: RunStore | None, run_id: int | None) -> None:
        self.store = store
        self.run_id = run_id
        self.error: StoreError | None = None

    def _write(self, fn: Callable[[RunStore, int], None]) -> None:
        if self.store is None or self.run_id is None or self.error is not None:
            return
        try:
            fn(self.store, self.run_id)
        except StoreError as exc:
            self.error = exc

    def rounds(self, got: Mapping[str, Rounds], first_round: int) -> None:
        """Every probe of every node, numbered from ``first_round`` (deep: one row each)."""

        def write(store: RunStore, run_id: int) -> None:
            for r in got.values():
                for i, p in enumerate(r.probes):
                    store.record_probe(run_id, p, first_round + i)

        self._write(write)

    def done(self, summary: RunSummary, at: datetime) -> None:
        def write(store: RunStore, run_id: int) -> None:
            store.record_verdicts(run_id, summary)
            store.finish_run(run_id, at, "done")

        self._write(write)
        if self.error is not None:
            self.failed(at)

    def failed(self, at: datetime) -> None:
        """Mark the run failed, without masking the error that interrupted it."""
        if self.store is not None and self.run_id is not None:
            with contextlib.suppress(ScreenerError):
                self.store.finish_run(self.run_id, at, "failed")


def _longest(got: Mapping[str, Rounds]) -> float:
    """The node that kept the round busy longest: its probes' durations summed."""
    return max((sum(p.duration_s for p in r.probes) for r in got.values()), default=0.0)
