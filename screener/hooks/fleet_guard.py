"""The fleet's view of a small allocation's slow nodes (issue 27): a 1- or 2-node job cannot
tell one bad drive from a shared cause on its own, but the partition's other nodes were
probed minutes (or seconds, by concurrent prologs) ago. Pure: the hook reads the figures.

A node is *slow now* in a direction (read or write) when its newest figure in the window is
below ``drop`` x its yardstick. The yardstick is its usual level: the median of its own
baseline figures from *other* runs than that newest one, else the fleet's usual level (the
median of the nodes' usual levels). When nobody in the partition has a usual level yet (a
new store, no sweep: issue 44), figures taken minutes apart are peers too: each node's
newest figure is judged against the median of the *other* nodes' newest figures of the
same recipe. Either way a figure is never its own yardstick. Many nodes slow now together,
in the direction the allocation's node is slow in, is a shared cause; one is one node.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from screener.hostlist import fold_nodes

DIRECTIONS = ("read", "write")

Yardstick = Literal["usual", "peers"]
PEERS_SAID = "against each other's recent figures (no usual level yet)"


@dataclass(frozen=True)
class FleetFigures:
    """What the store says of the partition, within the fleet window, per direction."""

    # direction -> node -> newest seq figure (bytes/s), any run or round within the window
    now: Mapping[str, Mapping[str, float]]
    # direction -> node -> baseline figures (bytes/s) of runs other than the newest one
    usual: Mapping[str, Mapping[str, Sequence[float]]]
    window_s: float
    # node -> the probe recipe of its newest figures: with no usual level, only figures of
    # one recipe are each other's yardstick (like with like); absent nodes share one
    recipes: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetView:
    """Which partition nodes were judged within the window, and which of them were slow,
    per direction; against what (``yardstick``) and how far (``ratio``: figure over it)."""

    judged: Mapping[str, frozenset[str]]
    slow: Mapping[str, frozenset[str]]
    window_s: float
    yardstick: Mapping[str, Yardstick] = field(default_factory=dict)
    ratio: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    probed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    drop: float = 0.0


def fleet_view(figures: FleetFigures, drop: float) -> FleetView:
    """Judge each node's newest figures against its own usual level (else the fleet's; with
    neither, against the other nodes' newest figures)."""
    judged: dict[str, frozenset[str]] = {}
    slow: dict[str, frozenset[str]] = {}
    yardstick: dict[str, Yardstick] = {}
    ratio: dict[str, Mapping[str, float]] = {}
    probed: dict[str, frozenset[str]] = {}
    for d in DIRECTIONS:
        now = figures.now.get(d, {})
        yardstick[d], ratio[d] = _judge(now, figures.usual.get(d, {}), figures.recipes)
        judged[d] = frozenset(ratio[d])
        slow[d] = frozenset(n for n, r in ratio[d].items() if r < drop)
        probed[d] = frozenset(now)
    return FleetView(judged, slow, figures.window_s, yardstick, ratio, probed, drop)


def _judge(
    now: Mapping[str, float],
    usual_figures: Mapping[str, Sequence[float]],
    recipes: Mapping[str, str | None],
) -> tuple[Yardstick, dict[str, float]]:
    """The yardstick used and each judged node's figure over its yardstick."""
    usual = {n: statistics.median(v) for n, v in usual_figures.items() if v}
    if usual:
        fleet_usual = statistics.median(usual.values())
        return "usual", _over(now, {n: usual.get(n, fleet_usual) for n in now})
    # No usual level anywhere: the others' newest figures of the same recipe, never its own.
    reference = {}
    for node in now:
        peers = [bw for n, bw in now.items() if n != node and recipes.get(n) == recipes.get(node)]
        if peers:
            reference[node] = statistics.median(peers)
    return "peers", _over(now, reference)


def _over(now: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, float]:
    """Figure over yardstick, for the nodes that have a positive one (no level to compare
    with is no evidence either way)."""
    return {n: now[n] / ref for n, ref in reference.items() if ref > 0}


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
    nodes judged (probed within the window, with a yardstick): too little evidence to tell
    one node from a shared cause, so nobody is drained, as before issue 27 (16 one-node
    prologs at once on 2 cores made 3 healthy nodes look slow on a fresh store). Judged
    against each other's figures (no usual level yet), a slow node must also be slow beside
    them: its verdict had no peers, and a burst's healthy node the verdict called slow is
    not below ``drop`` x the others' median."""
    own = set(allocation)
    directions = [d for d in DIRECTIONS if d in set(new.values())] or ["read"]
    judged = frozenset().union(*(view.judged.get(d, frozenset()) for d in directions))
    fleet_slow = frozenset().union(*(view.slow.get(d, frozenset()) for d in directions))
    others = judged - own
    said_dir = "/".join(directions)
    peers = [d for d in directions if view.yardstick.get(d) == "peers"]
    against = _against(directions, peers)
    if len(others) < min_others:
        return True, (
            f"fleet: only {len(others)} other partition nodes judged ({said_dir}) within "
            f"{view.window_s:g}s{against} (< {min_others}"
            f"{_unjudged(view, directions, own, bool(peers))}): "
            "too little evidence to tell one node from a shared cause, nobody drained"
        )
    lead = (
        f"fleet: {len(others)} other partition nodes judged ({said_dir}) within "
        f"{view.window_s:g}s{against}; "
        + ", ".join(_beside(view, node, d) for node, d in sorted(new.items()) if d in peers)
        + ": "
        if peers
        else "fleet: "
    )
    slow_now = {n for n, d in new.items() if n in view.slow.get(d, frozenset())}
    if doubted := sorted(n for n, d in new.items() if d in peers and n not in slow_now):
        return True, (
            f"{lead}{fold_nodes(doubted)} not slow beside them: no evidence but "
            f"{'its' if len(doubted) == 1 else 'their'} own run's, nobody drained"
        )
    slow = (fleet_slow - own) | set(new)
    population = others | own
    share = len(slow) / len(population)
    healthy = len(population) - len(slow)
    probed = "" if peers else f" partition nodes probed within {view.window_s:g}s"
    said = f"{lead}{len(slow)} of {len(population)}{probed} " + (
        f"{said_dir} slow ({fold_nodes(sorted(slow))}), {healthy} healthy"
    )
    if share > max_fraction:
        return True, f"{said} (> {max_fraction:g}): shared cause suspected, nobody drained"
    return False, f"{said}: not a shared cause"


def _against(directions: Sequence[str], peers: Sequence[str]) -> str:
    """Which yardstick judged the directions asked about ("" when usual levels did)."""
    if not peers:
        return ""
    if len(peers) == len(directions):
        return f" {PEERS_SAID}"
    usual = [d for d in directions if d not in peers]
    return f" ({'/'.join(usual)} against usual levels, {'/'.join(peers)} {PEERS_SAID})"


def _beside(view: FleetView, node: str, direction: str) -> str:
    """An allocation node's figure over the others' median, e.g. ``node03 read 0.04x their
    median (< 0.25)``; or that it had no figure of a recipe the others had."""
    ratio = view.ratio.get(direction, {}).get(node)
    if ratio is None:
        return f"{node} {direction}: no figure beside theirs (none, or another recipe)"
    cmp = "<" if ratio < view.drop else "not <"
    return f"{node} {direction} {ratio:.2f}x their median ({cmp} {view.drop:g})"


def _unjudged(view: FleetView, directions: Sequence[str], own: set[str], peers: bool) -> str:
    """Why other nodes probed within the window were not judged, if any were."""
    probed = frozenset().union(*(view.probed.get(d, frozenset()) for d in directions)) - own
    judged = frozenset().union(*(view.judged.get(d, frozenset()) for d in directions)) - own
    if not probed:
        return "; no other partition node probed within the window"
    if not (missed := probed - judged):
        return ""
    if peers:
        return f"; {fold_nodes(sorted(missed))} probed, no other figure of their recipe"
    return f"; {fold_nodes(sorted(missed))} probed, no level to compare with"
