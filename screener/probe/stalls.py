"""Stall modes in a completion-latency histogram: the I/Os that waited through a stall.

When a device stops serving reads for S ms, every I/O in flight (the queue depth) waits it
out and completes about S ms late, and no new I/O is issued meanwhile. So each stall adds
about ``iodepth`` I/Os at >= S ms, well apart from the body of the distribution: the
histogram is *bimodal*, with an empty stretch of latencies between the body and the stall
mode. A node that is only slower shifts its whole body instead, with no gap, and noise
spreads a continuous tail. Measured on the emulated cluster (reads stopped 150 ms of every
second; healthy bodies ended at 32-64 ms with no gap; the stalled node had 64-95 reads at
128-256 ms after an empty 64-128 ms octave): docs/detection.md. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GAP = 1.5  # the stall mode starts after latencies this factor wide where no I/O completed
BODY_FACTOR = 4.0  # ... at >= 4x the median I/O (queueing at this depth is not a stall)
MIN_NS = 50e6  # ... and >= 50 ms (the tail rules' floor: shorter is jitter, not a stall)
MAX_SHARE = 0.25  # a stall mode is a tail: at most a quarter of the I/Os


@dataclass(frozen=True)
class StallMode:
    """The I/Os above the gap: how many, where the mode starts, its median latency."""

    ios: int
    start_ns: float
    median_ns: float


def stall_mode(bins: Sequence[tuple[float, int]], iodepth: int) -> StallMode | None:
    """The lowest stall mode in ``bins`` ((latency ns, count), fio's json+ bins), or None.

    A split qualifies where the next non-empty bin lies >= GAP x above the previous one,
    at >= BODY_FACTOR x the median and >= MIN_NS, with at least half a queue depth of I/Os
    (one stall's worth) and at most MAX_SHARE of all I/Os above it.
    """
    filled = sorted((v, n) for v, n in bins if n > 0)
    total = sum(n for _, n in filled)
    if not filled or iodepth < 1:
        return None
    need = max(1, iodepth // 2)
    median = bin_at_rank(filled, total / 2)
    above = total  # I/Os at >= the current bin's latency
    prev: float | None = None
    for i, (value, n) in enumerate(filled):
        if (
            prev is not None
            and value >= GAP * prev
            and value >= max(BODY_FACTOR * median, MIN_NS)
            and need <= above <= MAX_SHARE * total
        ):
            upper = filled[i:]
            return StallMode(above, value, bin_at_rank(upper, above / 2))
        above -= n
        prev = value
    return None


def bin_at_rank(filled: Sequence[tuple[float, int]], rank: float) -> float:
    """Latency of the I/O at ``rank`` (counted from the fastest) in bins sorted by latency."""
    seen = 0
    for value, n in filled:
        seen += n
        if seen >= rank:
            return value
    return filled[-1][0]
