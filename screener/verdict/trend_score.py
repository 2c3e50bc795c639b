"""Early warning scored in shadow (issue 46), pure: did the nodes the trend flagged later
become SLOW, and how early? `screener accuracy --by rule` and bench/trend_lead.py read it.

The trend is replayed *as of each sweep* of a node: only the points up to that sweep, as
`screener trend` would have said then (same fit, window, recipe rule and look-back; no
look-ahead). Then, walking the node's sweeps and verdicts in time order:

- a **warning** opens at the first sweep whose replay is DECLINING (any figure) while the
  node is in no SLOW episode (below) and no warning is open;
- it is **confirmed** by the node's next SLOW onset (a SLOW verdict outside an episode)
  within ``horizon`` of it: the lead is the node's sweeps from the warning's sweep to
  that onset (a SLOW found in a sweep counts that sweep: the cluster test's "sweeps between
  the first DECLINING and the first SLOW") and the days between;
- it is **false** once ``horizon`` passed without one; **pending** while it may still be
  confirmed (``now`` is within the horizon);
- a SLOW onset with no open warning is **missed**, with why, from the last sweep's replay
  before it (its probe figures', not the drive's SMART counters): too few sweeps, a step
  change (steady until then), already past the line (the node read under it and was not
  SLOW yet), a worsening not surely within the horizon, or a warning whose horizon passed.
A DECLINING at the very sweep that was SLOW is no warning: it came no earlier than the rule.
A node stays in its SLOW episode while its verdicts are SLOW and for ``horizon`` after the
last one: a node that flaps about the line (SLOW, OK, SLOW) has one onset, and no warning
opens meanwhile (the slow rules have it already).
SLOW means SLOW_READ by default: the probe figures fitted are the reads' (a SLOW_WRITE node
is not what they foretell, nor a miss of theirs). UNKNOWN leaves the node's state as it was.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median

from screener.probe_data import Status
from screener.units import label, unit
from screener.verdict.trend import DAY_S, Point, Scale, TrendStatus, TrendVerdict

SLOW = frozenset({Status.SLOW_READ})
COUNTER = Scale.COUNTER  # a SMART count: no fit, so no forecast to count in ``judged``


class Outcome(enum.StrEnum):
    """What became of a warning."""

    CONFIRMED = "CONFIRMED"  # SLOW within the horizon
    FALSE = "FALSE"  # the horizon passed without a SLOW onset
    PENDING = "PENDING"  # the horizon has not passed yet


class Why(enum.StrEnum):
    """Why a SLOW onset had no warning before it."""

    TOO_FEW = "too few sweeps"
    STEP = "step change"
    BELOW = "already past the line"
    NOT_SURE = "not surely within the horizon"
    LATE = "warned, horizon passed"


Decide = Callable[[str, str, Sequence[Point]], TrendVerdict]  # (node, figure, points)


@dataclass(frozen=True)
class TrendRule:
    """What `screener trend` decides with: ``decide`` gives one figure's verdict from its
    points (the store's dispatch over the figures' scales and lines), ``horizon`` in real
    time (a cluster bench's sweeps are seconds apart), ``since`` the look-back from each
    sweep (trend.since_days; None: every point before it)."""

    decide: Decide
    horizon: timedelta
    since: timedelta | None = None


@dataclass(frozen=True)
class StatusAt:
    """One verdict of a node: when its run started, and the status."""

    at: datetime
    status: Status


@dataclass(frozen=True)
class Flag:
    """One warning and what became of it."""

    node: str
    at: datetime = field(metadata=label("warned"))
    sweep: int = field(metadata=unit("count", "sweep #"))  # the node's sweeps, 0 = first
    figure: str
    level: float | None = field(metadata=unit("ratio", "x peers"))
    outcome: Outcome
    slow_at: datetime | None = field(metadata=label("SLOW"))
    lead_sweeps: int | None = field(metadata=unit("count", "lead sweeps"))
    lead_days: float | None = field(metadata=unit("ratio", "lead days"))
    reason: str = field(metadata=label("reason", wrap=True))


@dataclass(frozen=True)
class Miss:
    """A SLOW onset with no warning before it."""

    node: str
    slow_at: datetime = field(metadata=label("SLOW"))
    sweeps_before: int = field(metadata=unit("count", "sweeps before"))
    why: Why
    reason: str = field(metadata=label("reason", wrap=True))  # the last replay's words


@dataclass(frozen=True)
class NodeScore:
    """One node's record from ``start`` on: its sweeps, how many had a forecast, how many
    said DECLINING, its warnings and misses."""

    node: str
    sweeps: int
    judged: int
    declining: int
    flags: tuple[Flag, ...]
    misses: tuple[Miss, ...]


@dataclass(frozen=True)
class TrendScore:
    """Every node's record summed: the rule's shadow record."""

    nodes: int  # nodes with a sweep, a warning or a miss
    sweeps: int  # node-sweeps replayed
    judged: int  # of them with a forecast: a probe figure fitted (not TOO_FEW)
    declining: int  # of them DECLINING
    flagged: int  # nodes with at least one warning
    warnings: int
    confirmed: int
    false: int
    pending: int
    missed: int
    missed_why: dict[str, int]
    lead_sweeps: float | None  # median over the confirmed warnings
    lead_days: float | None


class Replay:
    """A node's sweeps (the times of its points, oldest first) and, computed when asked,
    every figure's verdict as `screener trend` would have given it right after a sweep:
    only the points up to that sweep and within the look-back, nothing later."""

    def __init__(self, node: str, points: Mapping[str, Sequence[Point]], rule: TrendRule):
        self.node, self.rule = node, rule
        self.figures = {f: sorted(ps, key=lambda p: p.at) for f, ps in points.items() if ps}
        self.times = sorted({p.at for ps in self.figures.values() for p in ps})
        self._stamps = {f: [p.at for p in ps] for f, ps in self.figures.items()}
        self._done: dict[int, list[TrendVerdict]] = {}

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, i: int) -> list[TrendVerdict]:
        if i not in self._done:
            t = self.times[i]
            out = []
            for figure, ps in self.figures.items():
                stamps = self._stamps[figure]
                lo = 0 if self.rule.since is None else bisect_left(stamps, t - self.rule.since)
                hi = bisect_right(stamps, t)
                if hi > lo:  # a figure with no point then is left out, as node_trends does
                    out.append(self.rule.decide(self.node, figure, ps[lo:hi]))
            self._done[i] = out
        return self._done[i]


def replay(
    node: str, points: Mapping[str, Sequence[Point]], rule: TrendRule
) -> list[tuple[datetime, list[TrendVerdict]]]:
    """Each sweep of the node, oldest first, with every figure's verdict right after it."""
    r = Replay(node, points, rule)
    return [(t, r[i]) for i, t in enumerate(r.times)]


def _why(verdicts: Sequence[TrendVerdict] | None) -> tuple[Why, str]:
    """Why the replay before a SLOW onset gave no warning, and its words: from the probe
    figures (a SLOW_READ is theirs; a drive's SMART counter past its line says nothing of
    it), the most telling first."""
    if not verdicts:
        return Why.TOO_FEW, "no sweep before it"
    probe = [v for v in verdicts if v.scale is not COUNTER]
    if not probe:
        return Why.TOO_FEW, "no probe figure before it, only the drive's counters"
    order = [
        (TrendStatus.DECLINING, Why.LATE),
        (TrendStatus.BELOW, Why.BELOW),
        (TrendStatus.STEADY, Why.NOT_SURE),
        (TrendStatus.STEADY, Why.STEP),
        (TrendStatus.TOO_FEW, Why.TOO_FEW),
    ]
    for status, why in order:
        for v in probe:
            if v.status is status and (why is not Why.NOT_SURE or v.days_to_cross is not None):
                return why, v.reason
    return Why.STEP, probe[0].reason


@dataclass
class _Open:
    at: datetime
    sweep: int
    verdict: TrendVerdict


def score_node(
    node: str,
    points: Mapping[str, Sequence[Point]],
    verdicts: Sequence[StatusAt],
    rule: TrendRule,
    now: datetime,
    *,
    start: datetime | None = None,
    slow: frozenset[Status] = SLOW,
) -> NodeScore:
    """One node's warnings and misses (see the module): ``points`` per figure, ``verdicts``
    of every run that judged it, both any order, up to ``now``. Only what happened from
    ``start`` on is counted: earlier points still feed the fits and earlier verdicts the
    node's state; sweeps are replayed from one horizon before ``start`` on, so a warning
    still open at ``start`` takes its SLOW (it is not counted, nor is that SLOW missed)."""
    sweeps = Replay(node, points, rule)
    # at one instant the verdict goes first: a DECLINING at the SLOW sweep is no warning
    events: list[tuple[datetime, int, int]] = [(v.at, 0, i) for i, v in enumerate(verdicts)]
    events += [(t, 1, i) for i, t in enumerate(sweeps.times)]
    events.sort()
    early = None if start is None else start - rule.horizon

    def counted(at: datetime) -> bool:
        return start is None or at >= start

    flags: list[Flag] = []
    misses: list[Miss] = []
    replayed = judged = falling = done = 0
    is_slow = False
    last_slow: datetime | None = None
    open_: _Open | None = None

    def in_episode(at: datetime) -> bool:
        return is_slow or (last_slow is not None and at - last_slow <= rule.horizon)

    def close(w: _Open, outcome: Outcome, slow_at: datetime | None = None) -> None:
        if not counted(w.at):
            return
        lead = None if slow_at is None else done - w.sweep
        days = None if slow_at is None else (slow_at - w.at).total_seconds() / DAY_S
        v = w.verdict
        flags.append(Flag(node, w.at, w.sweep, v.figure, v.level, outcome, slow_at, lead, days,
                          v.reason))  # fmt: skip

    for at, kind, i in events:
        if open_ is not None and at - open_.at > rule.horizon:
            close(open_, Outcome.FALSE)
            open_ = None
        if kind == 0:
            status = verdicts[i].status
            if status in slow and not in_episode(at):
                if open_ is not None:
                    close(open_, Outcome.CONFIRMED, at)
                    open_ = None
                elif counted(at):
                    why, words = _why(sweeps[done - 1] if done else None)
                    misses.append(Miss(node, at, done, why, words))
            if status is not Status.UNKNOWN:
                is_slow = status in slow
            if is_slow:
                last_slow = at
            continue
        if early is not None and at < early:
            done += 1
            continue  # a warning opened this early has expired by ``start``
        last = sweeps[i]
        fired = [v for v in last if v.status is TrendStatus.DECLINING]
        if counted(at):
            replayed += 1
            judged += any(
                v.status is not TrendStatus.TOO_FEW and v.scale is not COUNTER for v in last
            )
            falling += bool(fired)
        if fired and open_ is None and not in_episode(at):
            open_ = _Open(at, done, fired[0])
        done += 1
    if open_ is not None:
        close(open_, Outcome.FALSE if now - open_.at > rule.horizon else Outcome.PENDING)
    return NodeScore(node, replayed, judged, falling, tuple(flags), tuple(misses))


def summarize(scores: Iterable[NodeScore]) -> TrendScore:
    """The nodes' records summed, with the median lead of the confirmed warnings."""
    seen = [s for s in scores if s.sweeps or s.flags or s.misses]
    flags = [f for s in seen for f in s.flags]
    outcomes = Counter(f.outcome for f in flags)
    leads = [f for f in flags if f.outcome is Outcome.CONFIRMED]
    whys = Counter(m.why.value for s in seen for m in s.misses)
    return TrendScore(
        nodes=len(seen),
        sweeps=sum(s.sweeps for s in seen),
        judged=sum(s.judged for s in seen),
        declining=sum(s.declining for s in seen),
        flagged=sum(1 for s in seen if s.flags),
        warnings=len(flags),
        confirmed=outcomes[Outcome.CONFIRMED],
        false=outcomes[Outcome.FALSE],
        pending=outcomes[Outcome.PENDING],
        missed=sum(whys.values()),
        missed_why=dict(sorted(whys.items())),
        lead_sweeps=median(f.lead_sweeps for f in leads if f.lead_sweeps is not None)
        if leads
        else None,
        lead_days=median(f.lead_days for f in leads if f.lead_days is not None) if leads else None,
    )
