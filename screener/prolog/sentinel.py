"""Prolog side of the fast path's sentinel (issue 28): run it on every fresh node at once
and judge each against the node's own usual read: by default a dd read judged against the
median of the node's own earlier dd readings (``prolog.sentinel_reader = "dd"``; a node
with too few of them reads with fio, against its usual fio seq read, and learns a dd
reading beside it when that fio read passes). Start in-job iostat on the same connections
when the whole allocation stays on the fast path."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from screener.errors import ProbeError, ScreenerError, TransportError
from screener.hooks.log import HookLog
from screener.hooks.start_iostat import start_job_iostat
from screener.hostlist import fold_nodes
from screener.policy import Policy
from screener.probe.fio import parse_fio
from screener.probe.sentinel import (
    DD_GRACE_S,
    DD_SPAN,
    SENTINEL_JOB,
    SentinelResult,
    dd_recipe,
    dd_sentinel_argv,
    judge_sentinel,
    parse_dd,
    sentinel_argv,
)
from screener.probe.short import short_read_depth, triage_policy
from screener.slurm.client import SlurmJob
from screener.store.history import history_window, own_history
from screener.store.slurm_records import SlurmRecords
from screener.transport.base import Transport, check

# Seconds allowed beyond the sentinel's own runtime (connect, fio start, in-flight drain):
# a node that takes longer is not "as fast as last time", so it gets the full probe.
SENTINEL_SLACK_S = 5.0
# A sentinel below the threshold but above this fraction of it reads once more before the
# node gets the full probe (1/25 of its usual level is no close call; 0.3x at 0.5 is).
CLOSE_FACTOR = 0.25


# The dd reader (issue 22) is trusted once a node has this many dd readings of its own
# (own_dd_readings: same recipe, within the history window, the newest DD_READINGS_KEEP);
# until then its sentinel is fio's, and a fio sentinel that passes (>= sentinel_drop x its
# usual) adds a dd reading taken just before it, unless that reading is over DD_PLAUSIBLE x
# what fio read (the emulated throttle let one learning read in three through whole, 2-3
# GB/s at 300 MB/s: 7-10x). Not 2x: fio's 0.1 s window carries its own start, so on a
# fast device it reads below one 1 MiB read at a time; unpaced, dd read 2.0-3.0x fio beside
# it on healthy nodes (2026-12-04/05), which kept 1-2 nodes of 8 on the fio sentinel, +0.15
# s on every fast path (0.60 s against 0.45 s all-dd; issue 44).
# Issue 44: the bar was 0.8x, which healthy unpaced nodes rarely read (median 0.66-0.70x,
# lowest 0.52: sentinel_unpaced.json), so they never left the slower fio sentinel. A dd
# sentinel is judged against the median of the readings: with 3, no one odd reading (a
# learning read beside a fio at 0.5x, or a throttle's escape under DD_PLAUSIBLE) moves it.
DD_READINGS_MIN = 3
DD_READINGS_KEEP = 5
DD_PLAUSIBLE = 4.0


async def run_sentinels(
    transport: Transport,
    nodes: Sequence[str],
    usual: Mapping[str, Sequence[float]],
    policy: Policy,
    dd_usual: Mapping[str, Sequence[float]] | None = None,
) -> list[SentinelResult]:
    """Each node's sentinel, all at once; errors become failed sentinels (full probe).
    With ``prolog.sentinel_reader = "dd"``, a node with DD_READINGS_MIN dd readings
    (``dd_usual``) reads with dd against their median; the others read with fio against
    ``usual`` and once with dd too: ``dd_reading`` when the fio read passed (to be
    recorded), else a ``dd_dropped`` line that says why not (to be logged)."""
    pp = policy.prolog
    probe = dataclasses.replace(policy.probe, seq_iodepth=short_read_depth(policy))
    argv = sentinel_argv(probe, pp.sentinel_s)
    timeout = min(policy.transport.command_timeout_s, pp.sentinel_s + SENTINEL_SLACK_S)
    dd_bound = 2.5 * DD_SPAN * pp.sentinel_s + DD_GRACE_S  # timeout's own, in dd_sentinel_argv
    dd_timeout = min(policy.transport.command_timeout_s, dd_bound + SENTINEL_SLACK_S)
    dd_on = pp.sentinel_reader == "dd"
    dd_known = {n: list(v) for n, v in (dd_usual or {}).items() if len(v) >= DD_READINGS_MIN}

    async def dd(node: str, expect: float) -> float:
        res = await transport.run(
            node, dd_sentinel_argv(probe, pp.sentinel_s, expect), timeout=dd_timeout
        )
        return parse_dd(res.exit_status, res.stderr, node)

    async def fio(node: str) -> float:
        res = check(await transport.run(node, argv, timeout=timeout))
        job = parse_fio(res.stdout, node).job(SENTINEL_JOB)
        if job is None:
            raise ProbeError(node, f"fio output has no {SENTINEL_JOB} job")
        return job.bw_bytes

    async def one(node: str) -> SentinelResult:
        mine = usual.get(node, ())
        if dd_on and node in dd_known:  # as much as its usual fio rate reads (a stable count)
            bw, error = await _figure(dd(node, statistics.median(mine or dd_known[node])))
            # judge_sentinel's level is the median of the readings (one odd one moves it not)
            return judge_sentinel(node, bw, error, dd_known[node], pp.sentinel_drop, "dd")
        # Learning a node's dd level: dd reads first, as it will in later prologs (the
        # first read after idle), then fio judges whether the node reads as usual now.
        learn = dd_on and bool(mine)  # a missing reading costs nothing but time
        reading, dd_error = (
            await _figure(dd(node, statistics.median(mine))) if learn else (None, None)
        )
        bw, error = await _figure(fio(node))
        result = judge_sentinel(node, bw, error, mine, pp.sentinel_drop)
        if not learn:
            return result
        why = _not_kept(result, reading, dd_error, pp.sentinel_drop)
        if why:
            return dataclasses.replace(result, dd_dropped=(f"{node}: {why}",))
        return dataclasses.replace(result, dd_reading=reading)

    first = await asyncio.gather(*(one(n) for n in nodes))
    # A close call reads again before it costs a full probe: on the emulated cluster (8
    # nodes on 2 cores) half the 0.1 s sentinels of one allocation read 0.27-0.43x while
    # their peers' SSH sessions started; a node truly that slow fails twice.
    close = [r.node for r in first if _close_call(r, pp.sentinel_drop)]
    again = {r.node: r for r in await asyncio.gather(*(one(n) for n in close))}
    return [_second(r, again[r.node]) if r.node in again else r for r in first]


def own_dd_readings(
    policy: Policy, records: SlurmRecords, fresh: list[str]
) -> dict[str, list[float]]:
    """Each fresh node's own dd sentinel readings (same file, block size and bound, within
    the history age window), when the sentinel reads with dd."""
    pp = policy.prolog
    if pp.sentinel_reader != "dd":
        return {}
    _, since = history_window(policy, datetime.now(UTC))
    recipe = dd_recipe(policy.probe, pp.sentinel_s)
    return records.sentinel_readings(fresh, recipe, since, DD_READINGS_KEEP)


def record_dd(
    policy: Policy, records: SlurmRecords | None, results: list[SentinelResult], log: HookLog
) -> None:
    """Log each dd reading not kept (one line per node: the figure and the yardstick it
    missed), store those taken beside fio sentinels that passed; a store that fails here
    costs only the readings (the next fast path takes them again)."""
    for line in (line for r in results for line in r.dd_dropped):
        log(line)
    readings = {r.node: r.dd_reading for r in results if r.passed and r.dd_reading}
    if not readings or records is None:
        return
    try:
        recipe = dd_recipe(policy.probe, policy.prolog.sentinel_s)
        records.record_sentinel_readings(readings, recipe, datetime.now(UTC))
    except ScreenerError as exc:
        log(f"dd sentinel readings of {fold_nodes(list(readings))} not recorded: {exc}")


def _not_kept(
    result: SentinelResult, reading: float | None, dd_error: str | None, drop: float
) -> str | None:
    """Why the dd ``reading`` taken before the fio sentinel ``result`` is not the node's dd
    level, said with its yardstick; None when it is: fio passed and dd <= DD_PLAUSIBLE x
    fio."""
    if reading is None:
        return f"no dd reading to keep as its dd level: {dd_error or 'no figure'}"
    said = f"dd {reading / 1e6:,.0f} MB/s not kept as its dd level"
    bw, ratio = result.read_bw, result.ratio
    if bw is None or ratio is None:  # the fio sentinel failed, or no usual to judge it by
        return f"{said}: no fio read as usual beside it ({result.reason})"
    if not result.passed:
        return f"{said}: fio read {ratio:.2f}x its usual (< {drop:g})"
    if reading > DD_PLAUSIBLE * bw:
        fio_said = f"{reading / bw:.1f}x what fio read beside it ({bw / 1e6:,.0f} MB/s)"
        return f"{said}: {fio_said} (> {DD_PLAUSIBLE:g})"
    return None


async def _figure(reading: Awaitable[float]) -> tuple[float | None, str | None]:
    """(bytes/s, None), or (None, why) when the read could not run or be parsed."""
    try:
        return await reading, None
    except (TransportError, ProbeError) as exc:
        return None, str(exc)


def _close_call(r: SentinelResult, drop: float) -> bool:
    """A failed sentinel within CLOSE_FACTOR of the threshold (a figure, a usual level)."""
    if r.passed or r.read_bw is None or not r.usual_bw:
        return False
    return r.read_bw >= r.usual_bw * drop * CLOSE_FACTOR


def _second(first: SentinelResult, second: SentinelResult) -> SentinelResult:
    """The second read decides; its reason keeps the first figure, its log the first's dd
    reading not kept."""
    ratio = first.read_bw / first.usual_bw if first.read_bw and first.usual_bw else 0.0
    said = f"{second.reason} (first read {ratio:.2f}x)"
    dropped = first.dd_dropped + second.dd_dropped
    return dataclasses.replace(second, reason=said, dd_dropped=dropped)


async def sentinel_then_iostat(
    transport: Transport,
    policy: Policy,
    job: SlurmJob,
    fresh: Sequence[str],
    usual: Mapping[str, Sequence[float]],
    log: HookLog,
    iostat: bool = True,
    dd_usual: Mapping[str, Sequence[float]] | None = None,
) -> list[SentinelResult]:
    """Sentinels on ``fresh`` (every node of the job) over ``transport`` (the caller's, left
    open); when they all pass and ``iostat``, start in-job iostat over the same connections
    (else the prolog starts it later)."""
    results = await run_sentinels(transport, fresh, usual, policy, dd_usual)
    if iostat and policy.prolog.iostat and all(r.passed for r in results):
        await start_job_iostat(transport, job, {}, policy, log)
    return results


@dataclass
class SentinelsBeside:
    """The sentinels of ``fresh`` as a run_loop ``beside`` step: they read while the job's
    other nodes are probed (their I/O never meets: other nodes), over the screen's
    transport; ``results`` once it ran. Never raises: a surprise fails every sentinel (full
    probe), said in each reason."""

    policy: Policy
    fresh: Sequence[str]
    usual: Mapping[str, Sequence[float]]
    dd_usual: Mapping[str, Sequence[float]] | None = None
    results: list[SentinelResult] = field(default_factory=list)

    async def __call__(self, transport: Transport) -> None:
        try:
            found = await run_sentinels(
                transport, self.fresh, self.usual, self.policy, self.dd_usual
            )
        except Exception as exc:  # a bug must not lose the screen beside it
            why = f"sentinel failed: internal error: {exc!r}"
            found = [SentinelResult(n, False, why) for n in self.fresh]
        self.results = list(found)

    def failed(self) -> list[str]:
        """The nodes whose sentinel failed (their full probe follows the screen)."""
        return [r.node for r in self.results if not r.passed]


def usual_reads(policy: Policy, records: SlurmRecords, fresh: list[str]) -> dict[str, list[float]]:
    """Each fresh node's usual seq read, its sentinel's yardstick: its own baseline history
    of the full probe, or of the triage for a node only ever triaged."""
    now = datetime.now(UTC)
    usual = own_history(records.store, fresh, policy, now)
    if policy.prolog.triage:
        short = own_history(records.store, fresh, triage_policy(policy), now)
        usual = {n: usual.get(n) or short.get(n, []) for n in fresh}
    return usual
