"""Per-node decisions: pure functions over parsed probes, peers and history.

``evaluate`` judges one probe round; ``confirm`` merges a re-probe of the suspects into
the first round's verdicts, so only a slowness that shows up twice is final (seed 001 §7:
slowness comes and goes). Nothing here does I/O; docs/detection.md explains each rule.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from screener.model import NodeFacts, NodeProbe, RunSummary, Status, Verdict
from screener.policy import VerdictPolicy

SLOW = (Status.SLOW_READ, Status.SLOW_WRITE)
MIN_HISTORY = 3  # own-history rule needs at least this many past OK runs
_MAD_TO_SIGMA = 0.6745  # robust z = 0.6745 (x - median) / MAD  (Iglewicz & Hoaglin)


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

    def z(self, value: float) -> float:
        """Robust z-score of ``value`` in log space; negative means slower than peers."""
        return _MAD_TO_SIGMA * (_log(value) - self.log_median) / self.log_mad


def _log(value: float) -> float:
    return math.log(max(value, 1e-3))  # a node that moved no bytes is just very slow


def peer_stats(values: Sequence[float], policy: VerdictPolicy) -> PeerStats | None:
    """Median and MAD of log(values), or None when too few peers or a zero median.

    The MAD is floored at log(1 + ``mad_floor_fraction``): on a quiet, uniform fleet the
    raw MAD is tiny and would turn a 3% wobble into a huge z.
    """
    if len(values) < policy.min_peers:
        return None
    med = statistics.median(values)
    if med <= 0:
        return None
    logs = [_log(v) for v in values]
    log_med = statistics.median(logs)
    mad = statistics.median([abs(x - log_med) for x in logs])
    floor = math.log1p(policy.mad_floor_fraction)
    return PeerStats(med, log_med, max(mad, floor), len(values))


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


def _peer_slow(stats: PeerStats, value: float, policy: VerdictPolicy) -> bool:
    """Peer rule: a robust z beyond the threshold AND a real gap (below min_peer_drop x median).

    The second condition keeps a tight, quiet fleet from flagging a node 20% off.
    """
    return stats.z(value) < -policy.z_threshold and value < policy.min_peer_drop * stats.median


def _peer_reason(
    stats: PeerStats | None,
    value: float,
    label: str,
    fmt: Callable[[float], str],
    policy: VerdictPolicy,
) -> str | None:
    """The reason text when the peer rule fires for ``value``, else None."""
    if stats is None or not _peer_slow(stats, value, policy):
        return None
    return (
        f"{label} {fmt(value)} = {value / stats.median:.2f}x peer median "
        f"{fmt(stats.median)} (z={stats.z(value):.1f})"
    )


def _fmt_iops(iops: float) -> str:
    return f"{iops:,.0f} IOPS"


def _fmt_mb(bw_bytes: float) -> str:
    return f"{bw_bytes / 1e6:,.0f} MB/s" if bw_bytes >= 1e6 else f"{bw_bytes / 1e6:.2f} MB/s"


def _read_signals(
    p: NodeProbe,
    read: PeerStats | None,
    rand: PeerStats | None,
    history: Sequence[float],
    policy: VerdictPolicy,
) -> tuple[list[str], list[str], float | None, float | None]:
    """Rules that say "this node reads slowly": (signal tags, reason parts, z_read, z_rand)."""
    assert p.seq_read is not None and p.seq_write is not None
    tags: list[str] = []
    why: list[str] = []
    bw = p.seq_read.bw_bytes
    z_read = read.z(bw) if read else None
    if text := _peer_reason(read, bw, "seq read", _fmt_mb, policy):
        tags.append("peer_read")
        why.append(text)
    if policy.min_read_mb_s and bw / 1e6 < policy.min_read_mb_s:
        tags.append("abs_read")
        why.append(f"seq read {_fmt_mb(bw)} < floor {policy.min_read_mb_s:g} MB/s")
    ratio = p.write_read_ratio
    if ratio is not None and ratio > policy.max_write_read_ratio:
        tags.append("ratio")
        why.append(f"write/read {ratio:.1f}x > {policy.max_write_read_ratio:g}x")
    slow_frac = max(j.slow_fraction for j in (p.seq_read, p.rand_read) if j is not None)
    if slow_frac > policy.max_slow_fraction:
        tags.append("slow_ios")
        why.append(f"{slow_frac:.0%} of reads >= 100 ms")
    r_await = p.read_r_await_ms
    if policy.max_r_await_ms and r_await is not None and r_await > policy.max_r_await_ms:
        tags.append("r_await")
        why.append(f"iostat r_await {r_await:.0f} ms > {policy.max_r_await_ms:g} ms")
    z_rand = None
    if p.rand_read is not None:
        iops = p.rand_read.iops
        z_rand = rand.z(iops) if rand else None
        if text := _peer_reason(rand, iops, "4k rand read", _fmt_iops, policy):
            tags.append("peer_rand")
            why.append(text)
        if policy.min_rand_read_iops and iops < policy.min_rand_read_iops:
            tags.append("abs_rand")
            why.append(f"4k rand read {iops:,.0f} IOPS < floor {policy.min_rand_read_iops:g}")
    if len(history) >= MIN_HISTORY:
        own = statistics.median(history)
        if own > 0 and bw < policy.history_drop * own:
            tags.append("history")
            why.append(f"seq read {bw / own:.2f}x its own median {_fmt_mb(own)}")
    return tags, why, z_read, z_rand


def _write_signals(
    p: NodeProbe, write: PeerStats | None, policy: VerdictPolicy
) -> tuple[list[str], list[str]]:
    """Rules that say "this node writes slowly"."""
    assert p.seq_write is not None
    bw = p.seq_write.bw_bytes
    tags: list[str] = []
    why: list[str] = []
    if text := _peer_reason(write, bw, "seq write", _fmt_mb, policy):
        tags.append("peer_write")
        why.append(text)
    if policy.min_write_mb_s and bw / 1e6 < policy.min_write_mb_s:
        tags.append("abs_write")
        why.append(f"seq write {_fmt_mb(bw)} < floor {policy.min_write_mb_s:g} MB/s")
    return tags, why


def _judge(
    p: NodeProbe,
    stats: Mapping[str, PeerStats | None],
    history: Sequence[float],
    drift: Sequence[str],
    policy: VerdictPolicy,
) -> Verdict:
    """Verdict for one usable node given the run's peer statistics."""
    assert p.seq_read is not None and p.seq_write is not None
    r_tags, r_why, z_read, z_rand = _read_signals(p, stats["read"], stats["rand"], history, policy)
    w_tags, w_why = _write_signals(p, stats["write"], policy)
    problems = fact_problems(p.facts)
    figures = Verdict(
        node=p.node,
        status=Status.OK,
        reason="",
        read_mb_s=p.seq_read.mb_s,
        write_mb_s=p.seq_write.mb_s,
        rand_read_iops=p.rand_read.iops if p.rand_read else None,
        ratio=p.write_read_ratio,
        read_p99_ms=p.seq_read.lat_p99_ns / 1e6,
        z_read=z_read,
        z_rand=z_rand,
        signals=tuple(r_tags + w_tags),
    )
    if r_tags or w_tags:
        status = Status.SLOW_READ if r_tags else Status.SLOW_WRITE
        parts = r_why + w_why
        if problems:
            status = Status.DEGRADED
            parts = parts + problems
        parts = parts + [f"drift: {d}" for d in drift]
        return replace(figures, status=status, reason="; ".join(parts))
    if problems:
        return replace(figures, status=Status.DEGRADED, reason="; ".join(problems))
    return replace(figures, reason="within peers and thresholds")


def evaluate(
    probes: Sequence[NodeProbe],
    history: Mapping[str, Sequence[float]],
    policy: VerdictPolicy,
) -> RunSummary:
    """Judge one probe round: a Verdict per node, plus the shared-cause flag.

    Errors of any kind give UNKNOWN. If at least ``shared_cause_fraction`` of the usable
    nodes (and at least ``min_peers`` of them) look slow together, the cause is shared
    (filesystem, fabric, firmware rollout): none of them is called SLOW.
    """
    usable = [p for p in probes if p.ok]
    stats: dict[str, PeerStats | None] = {
        "read": peer_stats([p.seq_read.bw_bytes for p in usable if p.seq_read], policy),
        "write": peer_stats([p.seq_write.bw_bytes for p in usable if p.seq_write], policy),
        "rand": peer_stats([p.rand_read.iops for p in usable if p.rand_read], policy),
    }
    drift = fact_drift({p.node: p.facts for p in usable})
    verdicts: dict[str, Verdict] = {}
    for p in probes:
        if not p.ok:
            reason = p.error or "probe produced no read/write figures"
            verdicts[p.node] = Verdict(p.node, Status.UNKNOWN, reason)
        else:
            verdicts[p.node] = _judge(
                p, stats, history.get(p.node, ()), drift.get(p.node, []), policy
            )
    slow = [v for v in verdicts.values() if is_suspect(v)]
    shared = len(usable) >= policy.min_peers and len(slow) >= max(
        2, policy.shared_cause_fraction * len(usable)
    )
    shared_reason = ""
    if shared:
        shared_reason = (
            f"{len(slow)}/{len(usable)} nodes slow together: shared cause, no node blamed"
        )
        for v in slow:
            verdicts[v.node] = replace(
                v, status=Status.UNKNOWN, reason=f"{shared_reason} ({v.reason})"
            )
    return RunSummary(
        verdicts=tuple(verdicts[p.node] for p in probes),
        shared_cause=shared,
        shared_cause_reason=shared_reason,
        peer_read_median_mb_s=stats["read"].median / 1e6 if stats["read"] else None,
        peer_rand_median_iops=stats["rand"].median if stats["rand"] else None,
    )


def is_suspect(v: Verdict) -> bool:
    """A verdict that a performance rule fired for (SLOW_*, or DEGRADED with slow figures)."""
    return v.status in SLOW or (v.status == Status.DEGRADED and bool(v.signals))


def suspects(summary: RunSummary) -> list[str]:
    """Nodes to re-probe before any verdict is final."""
    return [v.node for v in summary.verdicts if is_suspect(v)]


def confirm(first: RunSummary, second: RunSummary) -> RunSummary:
    """Merge a re-probe round into the first round's verdicts.

    ``second`` was evaluated over the re-probed suspects plus the non-suspects' first-round
    probes. A suspect stays slow only if the re-probe agrees; if the re-probe errored it is
    UNKNOWN (never drain on an error); if it passed, the first finding was transient.
    """
    again = {v.node: v for v in second.verdicts}
    merged: list[Verdict] = []
    for v in first.verdicts:
        if not is_suspect(v) or v.node not in again:
            merged.append(v)
            continue
        v2 = again[v.node]
        if is_suspect(v2):
            merged.append(replace(v2, confirmed=True, reason=f"confirmed: {v2.reason}"))
        elif v2.status == Status.UNKNOWN:
            merged.append(replace(v2, reason=f"suspect ({v.reason}) but re-probe: {v2.reason}"))
        else:
            merged.append(replace(v2, reason=f"transient: first probe {v.reason}; re-probe passed"))
    return replace(
        second if second.shared_cause else first,
        verdicts=tuple(merged),
    )
