"""The fleet's view of a small allocation's slow nodes (issue 27): a 1- or 2-node job cannot
tell one bad drive from a shared cause on its own, but the partition's other nodes were
probed minutes (or seconds, by concurrent prologs) ago. Pure: the hook reads the figures.

A node is *slow now* in a direction (read or write) when its newest figure in the window is
below ``history_drop`` x its usual level: the median of its own baseline figures from
*other* runs than that newest one (a figure is never its own yardstick), else the fleet's
usual level. Many nodes slow now together, in the direction the allocation's node is slow
in, is a shared cause; one is one node.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from screener.hostlist import fold_nodes

DIRECTIONS = ("read", "write")


@dataclass(frozen=True)
class FleetFigures:
    """What the store says of the partition, within the fleet window, per direction."""

    # direction -> node -> newest seq figure (bytes/s), any run or round within the window
    now: Mapping[str, Mapping[str, float]]
    # direction -> node -> baseline figures (bytes/s) of runs other than the newest one
    usual: Mapping[str, Mapping[str, Sequence[float]]]
    window_s: float


@dataclass(frozen=True)
class FleetView:
    """Which partition nodes were judged within the window, and which of them were slow,
    per direction."""

    judged: Mapping[str, frozenset[str]]
    slow: Mapping[str, frozenset[str]]
    window_s: float


def fleet_view(figures: FleetFigures, drop: float) -> FleetView:
    """Judge each node's newest figures against its own usual level (else the fleet's)."""
    judged: dict[str, frozenset[str]] = {}
    slow: dict[str, frozenset[str]] = {}
    for d in DIRECTIONS:
        j, s = _judge(figures.now.get(d, {}), figures.usual.get(d, {}), drop)
        judged[d], slow[d] = j, s
    return FleetView(judged, slow, figures.window_s)


def _judge(
    now: Mapping[str, float], usual_figures: Mapping[str, Sequence[float]], drop: float
) -> tuple[frozenset[str], frozenset[str]]:
    usual = {n: statistics.median(v) for n, v in usual_figures.items() if v}
    fleet_usual = statistics.median(usual.values()) if usual else None
    judged: set[str] = set()
    slow: set[str] = set()
    for node, bw in now.items():
        reference = usual.get(node, fleet_usual)
        if reference is None or reference <= 0:
            continue  # no level to compare with: no evidence either way
        judged.add(node)
        if bw < drop * reference:
            slow.add(node)
    return frozenset(judged), frozenset(slow)


def judge_small(
    new: Mapping[str, str],
    allocation: Sequence[str],
    view: FleetView,
    max_fraction: float,
    min_others: int,
) -> tuple[bool, str]:
    """(hold back?, the log line): do the partition's recent figures make ``new`` (the slow
    nodes of a small allocation, each with the direction it is slow in: "read" or "write")
    a shared cause? The fleet is judged in those directions only: a write-slow node beside
    a fleet whose writes all dropped is a shared cause whatever the reads say. Too few other
    nodes judged (probed within the window and with a usual level to compare with): too
    little evidence to tell one node from a shared cause, so nobody is drained, as before
    issue 27 (16 one-node prologs at once on 2 cores made 3 healthy nodes look slow on a
    fresh store)."""
    own = set(allocation)
    directions = [d for d in DIRECTIONS if d in set(new.values())] or ["read"]
    judged = frozenset().union(*(view.judged.get(d, frozenset()) for d in directions))
    fleet_slow = frozenset().union(*(view.slow.get(d, frozenset()) for d in directions))
    others = judged - own
    said_dir = "/".join(directions)
    if len(others) < min_others:
        return True, (
            f"fleet: only {len(others)} other partition nodes judged ({said_dir}) within "
            f"{view.window_s:g}s (< {min_others}): too little evidence to tell one node from "
            "a shared cause, nobody drained"
        )
    slow = (fleet_slow - own) | set(new)
    population = others | own
    share = len(slow) / len(population)
    healthy = len(population) - len(slow)
    said = f"fleet: {len(slow)} of {len(population)} partition nodes probed within " + (
        f"{view.window_s:g}s {said_dir} slow ({fold_nodes(sorted(slow))}), {healthy} healthy"
    )
    if share > max_fraction:
        return True, f"{said} (> {max_fraction:g}): shared cause suspected, nobody drained"
    return False, f"{said}: not a shared cause"
