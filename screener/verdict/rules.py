"""The per-node rules behind ``screener.verdict.judge``: robust peer statistics and the signals.

Pure functions over parsed probes; docs/detection.md explains each rule and its defaults.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from screener.policy import VerdictPolicy
from screener.probe_data import FioJobResult, NodeFacts, NodeProbe

MIN_HISTORY = 3  # own-history rule needs at least this many past baseline runs
_MAD_TO_SIGMA = 0.6745  # robust z = 0.6745 (x - median) / MAD  (Iglewicz & Hoaglin)
SLOW_IO_NS = 100e6  # the json+ bins count I/Os at or above this as slow (seed 001)
# Queueing alone makes the *median* I/O wait iodepth / IOPS (Little's law): 100 ms at
# 1 MiB x QD32 for any device under ~335 MB/s. A share of slow I/Os is a stall only when
# the median I/O is well below the 100 ms mark, i.e. the slow ones are a tail.
QUEUE_FACTOR = 4.0
READ_JOBS = ("seq_read", "rand_read")
TAIL_FIGURES = (("p99", "lat_p99_ns"), ("p99.9", "lat_p999_ns"))
# A stall mode (probe/stalls.py) counts when its I/Os waited >= this x the peers' median
# p99.9: healthy emulated nodes showed single ~65 ms scheduler hiccups of a whole queue
# (1x their p99.9), the stalling node ~150 ms (2.5-3x) in seq reads and ~100 ms (10x) in
# 4 KiB random reads.
STALL_PEER_FACTOR = 2.0
# Signals that make a node DEGRADED, never SLOW, when no other rule fired: evidence worth
# probing again (not a baseline, no fast path), never a drain on its own.
SOFT_TAGS = frozenset({"stalls", "close_call"})


def borderline_level(policy: VerdictPolicy) -> float:
    """Read ratio below which a node is not clearly healthy: halfway (geometrically)
    between the peer rule's gap ``min_peer_drop`` (0.5) and par, 0.71 by default. A close
    call in round 1 (below it, an outlier by z, above the gap) is probed again; a suspect
    whose re-probe passed but still reads below it is DEGRADED ``borderline``."""
    return math.sqrt(policy.min_peer_drop)


def close_call(
    stats: PeerStats | None,
    value: float,
    policy: VerdictPolicy,
    borrowed: int,
    own: float | None = None,
) -> str | None:
    """``close_call``: seq read past the peers' noise (robust z < -``z_threshold``) but not
    past the gap (>= ``min_peer_drop`` x median), and below ``borderline_level``: neither
    clearly healthy nor clearly slow. DEGRADED and re-probed with the suspects, so the
    evidence of two rounds decides (issue 24). Needs a real population (no fleet figures).
    Not when the node reads at its own usual place (``own``, see ``own_place``, at or above
    ``borderline_level``): a slower drive model is where it always is, not a close call
    (issue 44), while one that dropped from its place still is."""
    if stats is None or borrowed or stats.count < policy.min_peers:
        return None
    if own is not None and own >= borderline_level(policy):
        return None
    ratio = value / stats.median
    z = stats.z(value)
    if z >= -policy.z_threshold or not policy.min_peer_drop <= ratio < borderline_level(policy):
        return None
    return (
        f"close call: seq read {fmt_mb(value)} = {fmt_ratio(ratio)}x peer median "
        f"{fmt_mb(stats.median)} (z={z:.1f}), between the gap {policy.min_peer_drop:g} and "
        f"{borderline_level(policy):.2f}: probed again"
    )


@dataclass(frozen=True)
class Bulk:
    """The healthy bulk of one figure: the values at or above ``min_peer_drop`` x the median,
    the nodes the peer rule's gap says cannot be slow. Present only when some value sits
    below the gap: those values inflate the MAD of everyone (issue 44: two 4x readers among
    healthy nodes spread 1,414-2,385 MB/s kept z at -3.0 while reading 0.26x)."""

    log_median: float
    log_mad: float  # floored as PeerStats.log_mad
    log_low: float  # log of its lowest value
    count: int

    def z(self, value: float) -> float:
        """Robust z-score of ``value`` against the bulk alone (log space)."""
        return _MAD_TO_SIGMA * (_log(value) - self.log_median) / self.log_mad

    def below_range(self, value: float) -> bool:
        """Is ``value`` below the bulk's lowest node by more than the bulk spans from its
        median down to that node? A flat healthy spread (seven nodes evenly over 2x) has a
        MAD near a quarter of its width, so a 3x reader at 0.42x scores only z=-2.6
        against it, yet sits 0.59x below the slowest healthy node."""
        span = max(self.log_median - self.log_low, self.log_mad)
        return self.log_low - _log(value) > span


@dataclass(frozen=True)
class PeerStats:
    """Robust centre and spread of one figure across the usable nodes of a run.

    The z-score is taken on the log of the figure: slowness is multiplicative (8x, 80x,
    6,000x), and on a linear scale a node at zero can never score below
    -0.6745 x median / MAD, which noisy peers (MAD 20% of the median) keep above -3.5.
    """

    median: float  # of the figure itself, for reasons and the min_peer_drop gap
    log_median: float
    log_mad: float  # floored, see peer_stats
    count: int
    bulk: Bulk | None = None  # the values at or above the gap, when some sit below it

    def z(self, value: float) -> float:
        """Robust z-score of ``value`` in log space; negative means below the peers."""
        return _MAD_TO_SIGMA * (_log(value) - self.log_median) / self.log_mad


MIN_BULK = 3  # a healthy bulk of fewer values gives no spread worth the name


def _log(value: float) -> float:
    return math.log(max(value, 1e-3))  # a node that moved no bytes is just very slow


def _centre(logs: Sequence[float], floor: float) -> tuple[float, float]:
    """Median and MAD (floored) of ``logs``."""
    med = statistics.median(logs)
    return med, max(statistics.median([abs(x - med) for x in logs]), floor)


def peer_stats(values: Sequence[float], policy: VerdictPolicy) -> PeerStats | None:
    """Median and MAD of log(values), or None when too few peers or a zero median; with the
    healthy bulk (``Bulk``) when at least one value is below ``min_peer_drop`` x median.

    The MAD is floored at log(1 + ``mad_floor_fraction``): on a quiet, uniform fleet the
    raw MAD is tiny and would turn a 3% wobble into a huge z.
    """
    if len(values) < policy.min_peers:
        return None
    med = statistics.median(values)
    if med <= 0:
        return None
    floor = math.log1p(policy.mad_floor_fraction)
    log_med, mad = _centre([_log(v) for v in values], floor)
    kept = [_log(v) for v in values if v >= policy.min_peer_drop * med]
    bulk = None
    if MIN_BULK <= len(kept) < len(values):
        bulk = Bulk(*_centre(kept, floor), min(kept), len(kept))
    return PeerStats(med, log_med, mad, len(values), bulk)


def fact_problems(facts: NodeFacts | None) -> list[str]:
    """Hardware/config facts that by themselves explain slowness (seeds 000, 003)."""
    if facts is None:
        return []
    out: list[str] = []
    if facts.pcie_downgraded:
        out.append(
            f"PCIe link {facts.pcie_speed} x{facts.pcie_width} below max "
            f"{facts.pcie_max_speed} x{facts.pcie_max_width}"
        )
    if facts.smart is not None:
        if facts.smart.critical_warning:
            out.append(f"NVMe critical warning 0x{facts.smart.critical_warning:02x}")
        if facts.smart.media_errors:
            out.append(f"NVMe media errors {facts.smart.media_errors}")
        if facts.smart.percentage_used >= 100:
            out.append(f"NVMe endurance used {facts.smart.percentage_used}%")
    if facts.md is not None:
        out.extend(f"RAID {a} degraded" for a in facts.md.degraded)
        out.extend(f"RAID {a} rebuilding" for a in facts.md.rebuilding)
    return out


_DRIFT_FIELDS = ("scheduler", "read_ahead_kb", "nr_requests", "write_cache")


def fact_drift(facts: Mapping[str, NodeFacts | None]) -> dict[str, list[str]]:
    """Per node, tunables that differ from the peers' majority value (seed 003's knobs)."""
    drift: dict[str, list[str]] = {n: [] for n in facts}
    for name in _DRIFT_FIELDS:
        values = {n: getattr(f, name) for n, f in facts.items() if f is not None}
        values = {n: v for n, v in values.items() if v is not None}
        if len(values) < 3:
            continue
        common, count = Counter(values.values()).most_common(1)[0]
        if count * 2 <= len(values):
            continue  # no clear majority: nothing to call drift
        for node, value in values.items():
            if value != common:
                drift[node].append(f"{name}={value} (peers {common})")
    return drift


def peer_outlier(
    stats: PeerStats,
    value: float,
    policy: VerdictPolicy,
    drop: float | None = None,
    own: float | None = None,
) -> str | None:
    """Peer rule: a real gap (below ``drop``, default ``min_peer_drop``, x median) AND out of
    the noise. Returns None, or what put it out of the noise ("" = the plain robust z).

    Out of the noise is any of: z beyond the threshold against every node; against the
    healthy bulk (``Bulk.z``); below the bulk's range by more than its width
    (``Bulk.below_range``); or, given ``own`` (its read / its own usual, over the round's
    such ratio: ``own_place``), below ``min_peer_drop`` of its own usual place too. The gap
    keeps a tight, quiet fleet from flagging a node 20% off; the others keep a wide,
    mixed fleet from hiding a 3-4x reader (issue 44)."""
    gap = policy.min_peer_drop if drop is None else drop
    if value >= gap * stats.median:
        return None
    if stats.z(value) < -policy.z_threshold:
        return ""
    bulk = stats.bulk
    beside = f"the {bulk.count} nodes >= {policy.min_peer_drop:g}x" if bulk else ""
    if bulk is not None and (z := bulk.z(value)) < -policy.z_threshold:
        return f"; z={z:.1f} beside {beside}"
    if bulk is not None and bulk.below_range(value):
        return f"; below the range of {beside} by more than its width"
    if own is not None and own < policy.min_peer_drop:
        return f"; {fmt_ratio(own)}x its own usual place"
    return None


def peer_reason(
    stats: PeerStats | None,
    value: float,
    label: str,
    fmt: Callable[[float], str],
    policy: VerdictPolicy,
    drop: float | None = None,
    own: float | None = None,
) -> str | None:
    """The reason text when the peer rule (``peer_outlier``) fires for ``value``, else None."""
    if stats is None or (why := peer_outlier(stats, value, policy, drop, own)) is None:
        return None
    return (
        f"{label} {fmt(value)} = {fmt_ratio(value / stats.median)}x peer median "
        f"{fmt(stats.median)} (z={stats.z(value):.1f}{why})"
    )


def own_place(bw: float, history: Sequence[float], level: float | None) -> float | None:
    """Seq read / its own history median, over the round's typical such ratio (``level``,
    taken only when the round reads below its history, as in history_reason): where the
    node reads against its usual place among the round. A round reading faster than its
    history does not move the node's place: a node is not blamed for the others' speed-up
    (issue 44: unthrottled peers read 1.6-2.7x their history when fewer shared the host; the
    throttled model read its own, 1.0x). None without ``MIN_HISTORY`` past baselines."""
    if len(history) < MIN_HISTORY or (own := statistics.median(history)) <= 0:
        return None
    return bw / own / (min(level, 1.0) if level is not None and level > 0 else 1.0)


def usual_levels(history: Mapping[str, Sequence[float]], nodes: Sequence[str]) -> dict[str, float]:
    """Per node of ``nodes`` with ``MIN_HISTORY`` past baselines: its usual level (their
    median)."""
    return {
        n: statistics.median(past)
        for n in nodes
        if len(past := history.get(n, ())) >= MIN_HISTORY and statistics.median(past) > 0
    }


def learned_place(node: str, levels: Mapping[str, float], min_nodes: int) -> float | None:
    """The node's usual level over the median of the round's usual levels (``usual_levels``,
    at least ``min_nodes`` of them): where its history says it reads among these peers,
    whatever the round reads today. None without enough history."""
    if node not in levels or len(levels) < min_nodes:
        return None
    return levels[node] / statistics.median(levels.values())


def ratio_crowd(ratios: Sequence[float], policy: VerdictPolicy) -> bool:
    """Most of the round (> ``shared_cause_fraction``, >= 2, of >= ``min_peers`` nodes with
    a write) reads over ``max_write_read_ratio`` slower than it writes: reads slow
    everywhere, so every node's ratio is high and the ratio alone picks nodes at random
    (issue 44: a 6x read slowdown with fast writes, 288-299 MB/s, all at 7x)."""
    over = sum(1 for r in ratios if r > policy.max_write_read_ratio)
    return (
        len(ratios) >= policy.min_peers
        and over >= 2
        and over > policy.shared_cause_fraction * len(ratios)
    )


def ratio_near_cut(ratios: Sequence[float], policy: VerdictPolicy) -> bool:
    """The round's healthy half already reads near ``max_write_read_ratio`` slower than it
    writes: the lower median of >= ``min_peers`` ratios at or above ``borderline_level``
    (0.71) x the cut (3.5x). The cut alone then picks nodes at random, so the ratio is
    judged against the round's (issue 44: within a 6x read slowdown with fast writes, the
    round at 5.0-5.4x, not yet "most over 5x", 2 of 8 nodes reading 1.00x their peers were
    drained on `write/read 5.2x > 5x`). The lower median: half a round of slow readers
    (two of four at 1/300) does not lift it."""
    if len(ratios) < policy.min_peers:
        return False
    return statistics.median_low(ratios) >= borderline_level(policy) * policy.max_write_read_ratio


def ratio_peers(ratios: Sequence[float], policy: VerdictPolicy) -> PeerStats | None:
    """Peer statistics of read/write (the inverse ratio), to judge a ratio against the
    round's: low read/write is a high write/read."""
    return peer_stats([1 / r if r > 0 else 1e3 for r in ratios], policy)


def ratio_reason(
    ratio: float | None, peers: PeerStats | None, relative: bool, policy: VerdictPolicy
) -> str | None:
    """``ratio``: write/read above ``max_write_read_ratio``; when ``relative`` (a crowd over
    it, or within a shared cause) also an outlier among the round's ratios by the peer
    rule on read/write (below half the round's, out of the noise), never alone."""
    if ratio is None or ratio <= policy.max_write_read_ratio:
        return None
    text = f"write/read {ratio:.1f}x > {policy.max_write_read_ratio:g}x"
    if not relative:
        return text
    inverse = 1 / ratio if ratio > 0 else 1e3
    if peers is None or (why := peer_outlier(peers, inverse, policy)) is None:
        return None
    typical = 1 / peers.median
    return (
        f"{text} and {ratio / typical:.1f}x the round's median {typical:.1f}x "
        f"(z={peers.z(inverse):.1f}{why})"
    )


def fmt_ratio(x: float) -> str:
    """A ratio to a median: two decimals, or two significant digits below 0.01, so a node
    at 1/300 of its peers reads 0.0033x, not 0.00x."""
    return f"{x:.2f}" if x >= 0.01 or x <= 0 else f"{x:.2g}"


def fmt_iops(iops: float) -> str:
    return f"{iops:,.0f} IOPS"


def fmt_mb(bw_bytes: float) -> str:
    return f"{bw_bytes / 1e6:,.0f} MB/s" if bw_bytes >= 1e6 else f"{bw_bytes / 1e6:.2f} MB/s"


def fmt_ms(ns: float) -> str:
    ms = ns / 1e6
    return f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.2f} ms"


@dataclass(frozen=True)
class TailStats:
    """The peers' latency tails of one read job: p99 and p99.9 stats, median slow share."""

    tails: Mapping[str, PeerStats | None]
    slow_median: float
    count: int = 0  # nodes with this job
    stalled: int = 0  # of which with a stall mode (probe/stalls.py)


def tail_stats(jobs: Sequence[FioJobResult], policy: VerdictPolicy) -> TailStats:
    """Peer statistics of the latency tail of one read job across the usable nodes."""
    tails = {label: peer_stats([getattr(j, f) for j in jobs], policy) for label, f in TAIL_FIGURES}
    enough = len(jobs) >= policy.min_peers
    slow = statistics.median([j.slow_fraction for j in jobs]) if enough else 0.0
    stalled = sum(1 for j in jobs if j.stall_ios)
    return TailStats(tails, slow, len(jobs), stalled)


def stall_reason(
    job: FioJobResult, label: str, peers: TailStats, policy: VerdictPolicy
) -> str | None:
    """``stalls``: the job's latency histogram is bimodal (probe/stalls.py) and this node is
    one of a minority of the round's nodes that stall: the reason gives how long the reads
    waited, about how many stalls (I/Os / queue depth) and how much of the run they took."""
    if not job.stall_ios or job.stall_ns < policy.tail_floor_ms * 1e6:
        return None
    if peers.stalled * 2 > peers.count - 1:  # most of the round stalls: not this node's
        return None
    p999 = peers.tails.get("p99.9")
    if p999 is None or job.stall_ns < STALL_PEER_FACTOR * p999.median:
        return None
    seconds = job.runtime_ms / 1e3
    count = max(1, round(job.stall_ios / job.iodepth)) if job.iodepth else 1
    share = min(1.0, count * job.stall_ns / 1e6 / job.runtime_ms) if job.runtime_ms else 0.0
    return (
        f"{label} stalls: {job.stall_ios} reads waited ~{fmt_ms(job.stall_ns)} (= "
        f"{job.stall_ns / p999.median:.0f}x the peers' p99.9 {fmt_ms(p999.median)}): ~{count} "
        f"stall{'s' if count > 1 else ''} in {seconds:.1f} s, one every ~{seconds / count:.1f} "
        f"s, ~{share:.0%} of the time"
    )


def tail_signals(
    job: FioJobResult,
    label: str,
    peers: TailStats,
    policy: VerdictPolicy,
    usual: tuple[float, float] | None = None,
) -> tuple[list[str], list[str]]:
    """Latency rules for one read job: its tail against the peers', and stalls.

    ``peer_tail``: p99 or p99.9 above the peers' by a robust z beyond the threshold, at least
    ``tail_min_factor`` x their median and ``tail_floor_ms`` long (seed 001 §2: a stalling
    node keeps a normal mean). ``slow_ios``: the share of I/Os >= 100 ms exceeds the peers'
    median share by ``max_slow_fraction``, counted only when the median I/O is far below
    100 ms (else the 100 ms are plain queueing at this bandwidth and queue depth).
    ``usual``: ceilings (p99, p99.9 ns) of where this node's tail usually sits
    (verdict.judge.tail_ceilings): a tail at or under its ceiling is its own, not a finding.
    """
    tags: list[str] = []
    why: list[str] = []
    for i, (name, field) in enumerate(TAIL_FIGURES):
        stats = peers.tails.get(name)
        value: float = getattr(job, field)
        if stats is None or value < policy.tail_floor_ms * 1e6:
            continue
        if usual is not None and value <= usual[i]:
            continue
        if stats.z(value) > policy.z_threshold and value > policy.tail_min_factor * stats.median:
            tags.append("peer_tail")
            why.append(
                f"{label} {name} {fmt_ms(value)} = {value / stats.median:.0f}x peer median "
                f"{fmt_ms(stats.median)} (z={stats.z(value):.1f})"
            )
            break  # one tail figure is enough to say it
    if text := stall_reason(job, label, peers, policy):
        tags.append("stalls")
        why.append(text)
    excess = job.slow_fraction - peers.slow_median
    if (
        excess > policy.max_slow_fraction
        and job.lat_p50_ns * QUEUE_FACTOR < SLOW_IO_NS
        and not _one_queue_wait(job)
    ):
        tags.append("slow_ios")
        why.append(
            f"{job.slow_fraction:.0%} of {label}s >= 100 ms (peers {peers.slow_median:.0%}, "
            f"median I/O {fmt_ms(job.lat_p50_ns)})"
        )
    return tags, why


def _one_queue_wait(job: FioJobResult) -> bool:
    """Are the job's slow I/Os fewer than two whole queues? One wait of the device or the
    host holds every I/O in flight at once: in a short window at a low queue depth that is
    5% of the reads by itself (a healthy node's 0.5 s triage read at QD8 on the loaded
    emulated host: 9 of 179 >= 100 ms, escalated to a 14 s full probe; bench/time_to_start,
    2026-11-26). One event is no share: a stall mode says it (stall_reason)."""
    slow = job.slow_fraction * job.total_ios
    return job.iodepth > 0 and slow < 2 * job.iodepth


def history_reason(
    bw: float, history: Sequence[float], policy: VerdictPolicy, level: float | None = None
) -> str | None:
    """Own-history rule: seq read below ``history_drop`` x the median of past baselines.

    ``level`` is the round's typical ratio to own history (history_level). When the round's
    nodes all read below their history together, the bar moves down with them: a node is
    blamed for what is its own, not for the fleet's shared slowdown."""
    if len(history) < MIN_HISTORY:
        return None
    own = statistics.median(history)
    if own <= 0:
        return None
    shared = min(1.0, level) if level is not None and level > 0 else 1.0
    if bw >= policy.history_drop * own * shared:
        return None
    text = f"seq read {fmt_ratio(bw / own)}x its own median {fmt_mb(own)}"
    if shared < 1.0:
        text += f" (the round's nodes read {fmt_ratio(shared)}x theirs)"
    return text


def at_par(
    bw: float, peers: PeerStats | None, borrowed: int, level: float | None, policy: VerdictPolicy
) -> bool:
    """The node reads at or above ``borderline_level`` (0.71) x the round's own peer median
    (no fleet figures borrowed) in a round with a history yardstick (``level``): a drop
    from its own history is then its history out of line with its peers', not its read,
    and the history rule does not blame it. Issue 44, the prolog matrix (mixed fleet, a 6x
    read slowdown of every node): five nodes had learned the new level under the triage's
    recipe; three, held back from one triage, still compared with the full probe's healthy
    level and were `SLOW_READ confirmed` at 1.00x the round on history alone (0.16-0.24x
    their own). A node reading alike with its peers does not drag their job. Without a
    yardstick (a small allocation, few nodes with history) the history rule holds: a
    uniformly slow allocation reads at par with itself."""
    if level is None or peers is None or borrowed or peers.median <= 0:
        return False
    return bw >= borderline_level(policy) * peers.median


# The round's nodes reading below this fraction of their own history (median) is a
# fleet-wide slowdown: those the plain history rule would blame are a shared cause instead.
SHARED_HISTORY_LEVEL = 0.5


def history_ratios(
    reads: Mapping[str, float], history: Mapping[str, Sequence[float]]
) -> dict[str, float]:
    """Seq read / own history median, for the round's nodes with enough history."""
    ratios = {}
    for node, bw in reads.items():
        past = history.get(node, ())
        if len(past) >= MIN_HISTORY and (own := statistics.median(past)) > 0:
            ratios[node] = bw / own
    return ratios


def history_level(ratios: Mapping[str, float], min_nodes: int) -> float | None:
    """The round's typical ratio to own history (their median); None when fewer than
    ``min_nodes`` nodes have history (no fleet-wide yardstick)."""
    return statistics.median(ratios.values()) if len(ratios) >= min_nodes else None


def read_stall(p: NodeProbe, policy: VerdictPolicy) -> str | None:
    """A fio timeout whose iostat shows a normal write phase, then reads crawling.

    fio runs seq_write then the reads; iostat on the target's device keeps sampling while
    fio hangs, so it shows what fio never got to report: the extreme slow reader.
    """
    if p.error_kind != "timeout":
        return None
    samples = p.target_iostat
    peak = max((s.wkb_s for s in samples), default=0.0)
    if peak <= 0:
        return None
    last_write = max(i for i, s in enumerate(samples) if s.wkb_s >= 0.1 * peak)
    writing = [s.wkb_s for s in samples[: last_write + 1] if s.wkb_s >= 0.1 * peak]
    reading = [s.rkb_s for s in samples[last_write + 1 :]]
    if not reading:
        return None
    write_kb = statistics.median(writing)
    read_kb = statistics.median(reading)
    if read_kb * policy.max_write_read_ratio >= write_kb:
        return None
    write_mb, read_mb = write_kb * 1.024e-3, read_kb * 1.024e-3  # iostat -k: 1024-byte kB
    return (
        f"fio timed out reading after a normal write (iostat {samples[0].device}: write "
        f"{write_mb:,.0f} MB/s, then read {read_mb:,.2f} MB/s): extreme slow reader"
    )
