"""Deep mode (seed 002, SNIA PTS steady state): repeat a node's probe until its sequential
read settles, or a cap of rounds; and say in the verdict whether it settled.

One loop for every deep probe (the sweep's Slurm step on each node, and SSH probes of
drained nodes): the rule is pure, the loop takes the single-round probe as a callable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence

from screener.policy import SweepPolicy
from screener.probe_data import NodeProbe, RunSummary

STEADY, NOT_STEADY = "steady", "not_steady"  # the verdict signal each deep node carries


def steady_state(
    values: Sequence[float], window: int, max_excursion: float, max_slope: float
) -> bool:
    """SNIA PTS steady state (seed 002) over the last ``window`` rounds: the range is within
    ``max_excursion`` of their mean, and the least-squares line's rise across the window
    (|slope| x (window - 1)) is within ``max_slope`` of that mean."""
    if len(values) < window:
        return False
    last = list(values[-window:])
    mean = sum(last) / window
    if mean <= 0:
        return False
    if max(last) - min(last) > max_excursion * mean:
        return False
    xs = range(window)
    xm = (window - 1) / 2
    slope = sum((x - xm) * (y - mean) for x, y in zip(xs, last, strict=True)) / sum(
        (x - xm) ** 2 for x in xs
    )
    return abs(slope) * (window - 1) <= max_slope * mean


def reads(rounds: Sequence[NodeProbe]) -> list[float]:
    """Sequential read bandwidth (bytes/s) of each round that has one."""
    return [p.seq_read.bw_bytes for p in rounds if p.seq_read is not None]


def settled(rounds: Sequence[NodeProbe], sweep: SweepPolicy) -> bool:
    """Whether ``rounds`` reached steady state under the policy's window and bounds."""
    return steady_state(
        reads(rounds), sweep.deep_window, sweep.deep_max_excursion, sweep.deep_max_slope
    )


async def deep_rounds(
    once: Callable[[], Awaitable[NodeProbe]], sweep: SweepPolicy
) -> tuple[list[NodeProbe], bool]:
    """Probe with ``once`` until steady state or ``deep_max_rounds``; an unusable round
    ends the loop (an error is not a figure). Returns every round and whether it settled."""
    rounds: list[NodeProbe] = []
    while True:
        p = await once()
        rounds.append(p)
        if not p.usable:
            return rounds, False
        if settled(rounds, sweep):
            return rounds, True
        if len(rounds) >= sweep.deep_max_rounds:
            return rounds, False


def note(rounds: Sequence[NodeProbe], steady: bool, window: int) -> str:
    """One clause for the verdict's reason: the window judged and its read figures."""
    figs = reads(rounds)
    last = figs[-window:]
    if not last:
        return f"deep: not steady ({len(rounds)} rounds, no read figure)"
    first_no = len(figs) - len(last) + 1
    span = f"rounds {first_no}-{len(figs)} read {last[0] / 1e6:,.0f} -> {last[-1] / 1e6:,.0f} MB/s"
    if steady:
        return f"deep: steady over {span}"
    return f"deep: not steady after {len(rounds)} rounds ({span})"


def annotate(
    summary: RunSummary,
    deep: Mapping[str, tuple[Sequence[NodeProbe], bool]],
    window: int,
) -> RunSummary:
    """Each deep node's verdict gets the signal ``steady`` or ``not_steady`` and a clause
    naming its window, after the judgement (they explain, they do not decide)."""
    verdicts = []
    for v in summary.verdicts:
        if v.node not in deep:
            verdicts.append(v)
            continue
        rounds, steady = deep[v.node]
        clause = note(rounds, steady, window)
        verdicts.append(
            dataclasses.replace(
                v,
                signals=(*v.signals, STEADY if steady else NOT_STEADY),
                reason=f"{v.reason}; {clause}" if v.reason else clause,
            )
        )
    return dataclasses.replace(summary, verdicts=tuple(verdicts))
