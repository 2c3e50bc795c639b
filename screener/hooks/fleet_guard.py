"""The fleet's view of a small allocation's slow nodes (issue 27): a 1- or 2-node job cannot
tell one bad drive from a shared cause on its own, but the partition's other nodes were
probed minutes (or seconds, by concurrent prologs) ago. Pure: the hook reads the figures.

A node is *slow now* when its newest seq-read figure in the window is below
``history_drop`` x its usual level (the median of its own baseline figures; without history,
the fleet's usual level). Many nodes slow now together is a shared cause; one is one node.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from screener.hostlist import fold_nodes


@dataclass(frozen=True)
class FleetFigures:
    """What the store says of the partition, within the fleet window."""

    now_read: Mapping[str, float]  # node -> newest seq-read figure (bytes/s), any run or round
    usual_read: Mapping[str, Sequence[float]]  # node -> its baseline figures (bytes/s)
    window_s: float


@dataclass(frozen=True)
class FleetView:
    """Which partition nodes were judged within the window, and which of them read slow."""

    judged: frozenset[str]
    slow: frozenset[str]
    window_s: float


def fleet_view(figures: FleetFigures, drop: float) -> FleetView:
    """Judge each node's newest figure against its own usual level (else the fleet's)."""
    usual = {n: statistics.median(v) for n, v in figures.usual_read.items() if v}
    fleet_usual = statistics.median(usual.values()) if usual else None
    judged: set[str] = set()
    slow: set[str] = set()
    for node, bw in figures.now_read.items():
        reference = usual.get(node, fleet_usual)
        if reference is None or reference <= 0:
            continue  # no level to compare with: no evidence either way
        judged.add(node)
        if bw < drop * reference:
            slow.add(node)
    return FleetView(frozenset(judged), frozenset(slow), figures.window_s)


def judge_small(
    new: Sequence[str],
    allocation: Sequence[str],
    view: FleetView,
    max_fraction: float,
    min_others: int,
) -> tuple[bool, str]:
    """(hold back?, the log line): do the partition's recent figures make ``new`` (the slow
    nodes of a small allocation) a shared cause? Too few other nodes judged (probed within
    the window and with a usual level to compare with): too little evidence to tell one
    node from a shared cause, so nobody is drained, as before issue 27 (16 one-node
    prologs at once on 2 cores made 3 healthy nodes look slow on a fresh store)."""
    own = set(allocation)
    others = view.judged - own
    if len(others) < min_others:
        return True, (
            f"fleet: only {len(others)} other partition nodes judged within {view.window_s:g}s "
            f"(< {min_others}): too little evidence to tell one node from a shared cause, "
            "nobody drained"
        )
    slow = (view.slow - own) | set(new)
    population = others | own
    share = len(slow) / len(population)
    healthy = len(population) - len(slow)
    said = f"fleet: {len(slow)} of {len(population)} partition nodes probed within " + (
        f"{view.window_s:g}s read slow ({fold_nodes(sorted(slow))}), {healthy} healthy"
    )
    if share > max_fraction:
        return True, f"{said} (> {max_fraction:g}): shared cause suspected, nobody drained"
    return False, f"{said}: not a shared cause"
