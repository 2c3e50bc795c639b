"""Early warning (issue 46), pure: a node's figure across its sweeps, normalised by each
round's peer median, fitted with a robust slope; DECLINING when the fit says it crosses the
slow line within a horizon. A warning only: nothing here (or downstream) drains a node.

The fit is Theil-Sen (the median of every pairwise slope) on the *log* of the ratio, with
Sen's distribution-free confidence interval from Kendall's S (Sen 1968; Gilbert 1987, ch.
16). Why these:
- log: noise here is a factor (concurrent probes move a read 2x), and a wearing drive or a
  tightening throttle loses a share per sweep; the peer rules read log bandwidth too.
- Theil-Sen: one odd sweep (a busy host, a round-2 reading) cannot bend it (29 % breakdown).
- Kendall's interval rather than a bootstrap: deterministic (the same series gives the same
  answer in the CLI, the exporter and the tests: no seed), exact rank arithmetic with no
  assumption on the noise's shape, and O(n^2) for the ~12 sweeps it sees.
A node is DECLINING only when even the slowest fall its band allows (the upper bound of the
slope, below zero) crosses the line within the horizon; the words give the point forecast.
Healthy nodes here spread up to 2x within one run: over 1,535 windows of the benches'
healthy round-1 ratios, the point slope with a band below zero flagged 22, this rule 2 (a
node's step from 3.6x to 1.0x between scenarios), docs/detection.md "Early warning".
Gaps are allowed (the slope is per day of real time; "per sweep" is per the series' median
interval), and a new probe recipe starts a new series (figures meet only their own recipe's).

Each figure has a ``Scale``: how it is fitted, which way is worse, and its line:
- seq read, rand read (FALLING): node over the round's peer median, log; the line below is
  the peer rules' gap (min_peer_drop 0.5, rand_peer_drop 0.25).
- read p99 (RISING): the node's seq-read p99 over the round's peer median p99, log, fitted
  as it reads (higher is worse); the line above is the tail rule's tail_min_factor (4x).
  Not turned into peers over node: on the log scale that is only y -> -y, under which
  Theil-Sen and Kendall's band are symmetric (the same status, dates and band either way),
  so the choice is what the admin reads: "read p99 2.50x peers, rising 0.30x per sweep;
  crosses 4x" says it as the tail rule does ("seq read p99 111 ms = 6x peer median").
- stall share (SHARE): the seq read's share of reads >= 100 ms minus the round's peer
  median share, in percentage points, fitted linearly: a share is no factor (0 is the healthy norm;
  its log and a ratio to a median of 0 are undefined), and it is how the slow_ios rule
  reads it; the line above is that rule's max_slow_fraction (+5 points), the stall
  evidence that makes a node SLOW (a stall mode alone is DEGRADED at once: nothing to
  forecast). Ties at 0 (most sweeps of a healthy node) hold the slope at 0.
- percentage used, media errors (COUNTER, ``counting``): the drive's own SMART counters,
  not normalised (its wear and errors are its own, not the round's) and not split by
  recipe (the drive is the same whatever the probe reads), but a fall starts a new series
  (a counter falls only when the drive was replaced). No noise to fit: percentage used is
  forecast from its rise over the whole series, with the reading's integer resolution as
  the band (line 100 %, the facts rule's); media errors warn at any rise within the window
  (the facts rule already holds a node with any media error DEGRADED: the warning is that
  they keep coming). Only nodes with SMART facts have these figures.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import NormalDist, median

from screener.units import label, unit

DAY_S = 86_400.0
CENTURY = 36_500.0  # days: a forecast further out has no date


class TrendStatus(enum.StrEnum):
    """What the fit says of a node's figure."""

    DECLINING = "DECLINING"  # worsening beyond the noise; crosses the line within the horizon
    STEADY = "STEADY"  # no move beyond the noise, or one too slow to matter in the horizon
    BELOW = "BELOW"  # already past the line (above it for a rising one): the rules' business
    TOO_FEW = "TOO_FEW"  # too few sweeps of this recipe for a forecast


class Scale(enum.StrEnum):
    """How a figure is fitted and which way is worse (the module docstring says why)."""

    FALLING = "falling"  # x peers, log; lower is worse (seq read, rand read)
    RISING = "rising"  # x peers, log; higher is worse (read p99)
    SHARE = "share"  # a share minus the peers' median share, in points, linear; higher worse
    COUNTER = "counter"  # the drive's own monotone count (SMART); higher is worse


@dataclass(frozen=True)
class Point:
    """One sweep's figure of one node: its value over the round's peer median (``ratio``;
    for a SHARE figure its difference to the median in percentage points, for a COUNTER
    the raw count)."""

    at: datetime
    ratio: float
    recipe: str | None = None
    run_id: int | None = None


@dataclass(frozen=True)
class Fit:
    """Theil-Sen over (days, log ratio), or the value itself for a linear fit: slope per day
    with its band, the fitted level at the newest point, the series' cadence (median
    interval between points, in days)."""

    n: int
    slope: float
    low: float
    high: float
    level: float
    cadence_days: float
    last_at: datetime


@dataclass(frozen=True)
class TrendVerdict:
    """The decision for one node and figure, with the words an admin reads. ``level``,
    ``per_sweep`` and ``threshold`` are in the figure's own terms (``scale``): x peers,
    percentage points over the peers' share, or the counter itself."""

    node: str
    figure: str  # "seq read", "rand read", "read p99", "stall share", SMART counters
    status: TrendStatus
    sweeps: int = field(metadata=unit("count", "sweeps"))  # points of the current recipe
    level: float | None = field(metadata=unit("ratio", "now"))
    per_sweep: float | None = field(metadata=unit("ratio", "per sweep"))  # toward the line
    sweeps_to_cross: float | None = field(metadata=unit("count", "sweeps left"))
    days_to_cross: float | None = field(metadata=unit("ratio", "days left"))
    crosses_at: datetime | None = field(metadata=label("crosses", day=True))  # a forecast
    threshold: float = field(metadata=unit("ratio", "line"))
    recipe: str | None = field(metadata=label("recipe"))
    reason: str = field(metadata=label("reason", wrap=True))
    scale: Scale = field(default=Scale.FALLING, metadata=label("scale"))


def current_series(points: Sequence[Point], *, positive: bool = True) -> list[Point]:
    """The newest recipe's points, oldest first: a new recipe starts a new series (its
    figures are another test), and going back to an older recipe takes up its figures as
    history does (like with like). Points without a finite ratio are dropped, and with
    ``positive`` (a ratio to peers) those not above zero."""
    good = sorted(
        (p for p in points if math.isfinite(p.ratio) and (p.ratio > 0 or not positive)),
        key=lambda p: p.at,
    )
    if not good:
        return []
    recipe = good[-1].recipe
    return [p for p in good if p.recipe == recipe]


def _rank(sorted_values: Sequence[float], r: float) -> float:
    """The value at 1-based rank ``r`` (fractional: linear between neighbours), clamped."""
    r = min(max(r, 1.0), float(len(sorted_values)))
    lo = math.floor(r)
    frac = r - lo
    if frac == 0 or lo >= len(sorted_values):
        return sorted_values[lo - 1]
    return sorted_values[lo - 1] * (1 - frac) + sorted_values[lo] * frac


def _kendall_var(ys: Sequence[float]) -> float:
    """Var(S) of Kendall's statistic for n values, corrected for tied values."""
    n = len(ys)
    ties: dict[float, int] = {}
    for y in ys:
        ties[y] = ties.get(y, 0) + 1
    tied = sum(t * (t - 1) * (2 * t + 5) for t in ties.values() if t > 1)
    return (n * (n - 1) * (2 * n + 5) - tied) / 18.0


def fit(series: Sequence[Point], confidence: float = 0.9, *, log: bool = True) -> Fit | None:
    """Theil-Sen slope of log(ratio) (``log``) or of the ratio itself per day over
    ``series`` (oldest first) and its two-sided ``confidence`` band; None when fewer than
    3 points at distinct times."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    t0 = series[0].at if series else None
    xs = [(p.at - t0).total_seconds() / DAY_S for p in series] if t0 else []
    ys = [math.log(p.ratio) if log else p.ratio for p in series]
    slopes = sorted(
        (ys[j] - ys[i]) / (xs[j] - xs[i])
        for i in range(len(xs))
        for j in range(i + 1, len(xs))
        if xs[j] != xs[i]
    )
    gaps = [b - a for a, b in itertools.pairwise(xs) if b > a]
    if len(slopes) < 3 or not gaps:
        return None
    b = median(slopes)
    c = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(_kendall_var(ys))
    m = len(slopes)
    low = _rank(slopes, (m - c) / 2)
    high = _rank(slopes, (m + c) / 2 + 1)
    intercept = median(y - b * x for x, y in zip(xs, ys, strict=True))
    at_last = intercept + b * xs[-1]
    level = math.exp(at_last) if log else at_last
    return Fit(len(series), b, low, high, level, median(gaps), series[-1].at)


@dataclass(frozen=True)
class _Say:
    """How a scale words a figure: its level, its move per sweep, its line."""

    level: Callable[[float], str]
    move: Callable[[float], str]  # a per-sweep move toward the line (> 0), words
    band: Callable[[float], str]  # a per-sweep slope, signed, no unit
    unit: str  # of the band
    line: Callable[[float], str]
    worse: str  # "fall" or "rise"


def _x(v: float) -> str:
    return f"{v:g}x"


def _points(v: float) -> str:
    return f"{v:+.1f} points"


_SAY = {
    Scale.FALLING: _Say(
        lambda v: f"{v:.2f}x peers",
        lambda v: f"falling {v:.2f}x per sweep",
        lambda v: f"{v:+.3f}",
        "x per sweep",
        _x,
        "fall",
    ),
    Scale.RISING: _Say(
        lambda v: f"{v:.2f}x peers",
        lambda v: f"rising {v:.2f}x per sweep",
        lambda v: f"{v:+.3f}",
        "x per sweep",
        _x,
        "rise",
    ),
    Scale.SHARE: _Say(
        lambda v: f"{_points(v)} over peers",
        lambda v: f"rising {v:.2f} points per sweep",
        lambda v: f"{v:+.2f}",
        " points per sweep",
        _points,
        "rise",
    ),
}


def declining(
    node: str,
    points: Sequence[Point],
    threshold: float,
    horizon: timedelta,
    *,
    figure: str = "seq read",
    min_sweeps: int = 6,
    window: int = 12,
    confidence: float = 0.9,
    scale: Scale = Scale.FALLING,
) -> TrendVerdict:
    """The decision for one node's ``figure``: its newest recipe's last ``window`` points
    (at least ``min_sweeps``), DECLINING when even the slowest worsening the slope's band
    allows crosses ``threshold`` within ``horizon`` of the newest point. FALLING figures
    worsen downward, RISING and SHARE ones upward (a COUNTER: ``counting``)."""
    if scale is Scale.COUNTER:
        raise ValueError("a counter has no noise to fit: read it with counting()")
    log = scale is not Scale.SHARE
    up = scale is not Scale.FALLING
    say = _SAY[scale]
    series = current_series(points, positive=log)[-window:]
    recipe = series[-1].recipe if series else None
    f = fit(series, confidence, log=log) if len(series) >= max(min_sweeps, 3) else None
    if f is None:
        have = f"{len(series)} sweep{'s' if len(series) != 1 else ''}"
        return TrendVerdict(
            node, figure, TrendStatus.TOO_FEW, len(series), None, None, None, None, None,
            threshold, recipe,
            f"{node}: {figure}: {have} of this recipe, a forecast needs {min_sweeps}: no forecast",
            scale,
        )  # fmt: skip

    def y(v: float) -> float:
        return math.log(v) if log else v

    def step(slope: float) -> float:  # a slope per day as the figure moves per sweep
        d = slope * f.cadence_days
        return f.level * math.expm1(d) if log else d

    per_sweep = step(f.slope)

    def out(status: TrendStatus, days: float | None, reason: str) -> TrendVerdict:
        crosses = f.last_at + timedelta(days=days) if days is not None and days < CENTURY else None
        sweeps = None if days is None else days / f.cadence_days
        return TrendVerdict(
            node, figure, status, f.n, f.level, per_sweep, sweeps, days, crosses, threshold,
            recipe, reason, scale,
        )  # fmt: skip

    head = f"{node}: {figure} {say.level(f.level)}"
    if (f.level >= threshold) if up else (f.level <= threshold):
        side = "above" if up else "below"
        line = f"at or {side} the {say.line(threshold)} line: the slow rules' business, no forecast"
        return out(TrendStatus.BELOW, None, f"{head}, {line}")
    toward = f.low if up else f.high  # the slowest worsening the band allows
    if (toward <= 0) if up else (toward >= 0):
        band = f"{say.band(step(f.low))}..{say.band(step(f.high))}{say.unit}"
        return out(TrendStatus.STEADY, None, f"{head}, no {say.worse} beyond the noise ({band})")
    gap = y(threshold) - y(f.level)
    days = gap / f.slope
    slowest = gap / toward
    when = f"~{f.last_at + timedelta(days=days):%Y-%m-%d}" if days < CENTURY else "a century on"
    words = (
        f"{head}, {say.move(abs(per_sweep))}; crosses {say.line(threshold)} in "
        f"~{days / f.cadence_days:.0f} sweeps ({when})"
    )
    if slowest > horizon.total_seconds() / DAY_S:
        later = (
            f"at the slowest {say.worse} the noise allows ~{slowest / f.cadence_days:.0f} sweeps"
        )
        why = f"{words}: not surely within the {_span(horizon)} horizon ({later})"
        return out(TrendStatus.STEADY, days, why)
    return out(TrendStatus.DECLINING, days, words)


def counter_series(points: Sequence[Point]) -> list[Point]:
    """A SMART counter's points, oldest first, from its last fall on: a counter falls only
    when the drive was replaced (a new drive, a new series). Recipes are ignored (the
    drive's count, not the probe's figure); values not finite and >= 0 are dropped."""
    good = sorted(
        (p for p in points if math.isfinite(p.ratio) and p.ratio >= 0), key=lambda p: p.at
    )
    start = 0
    for i, (a, b) in enumerate(itertools.pairwise(good), 1):
        if b.ratio < a.ratio:
            start = i
    return good[start:]


def counting(
    node: str,
    points: Sequence[Point],
    threshold: float,
    horizon: timedelta,
    *,
    figure: str = "percentage used",
    unit_text: str = "",
    min_sweeps: int = 6,
    window: int = 12,
    any_rise: bool = False,
) -> TrendVerdict:
    """The decision for one of the drive's SMART counters (``counter_series``).

    ``any_rise`` (media errors): DECLINING when the count rose within the newest
    ``window`` points (at least 2), crossing now (0 days); past ``threshold`` without a
    rise: BELOW, the facts rule's business. Else (percentage used): the rise per day over
    the whole series given (the store's [trend] since_days; at least ``min_sweeps`` points;
    no window: a counter has no noise to outrun), DECLINING when even the slowest rise the
    reading's integer resolution allows (one less than read) reaches ``threshold`` within
    ``horizon``."""
    series = counter_series(points)
    if any_rise:
        series = series[-window:]
    need = 2 if any_rise else max(min_sweeps, 2)
    xs = [(p.at - series[0].at).total_seconds() / DAY_S for p in series] if series else []
    gaps = [b - a for a, b in itertools.pairwise(xs) if b > a]
    if len(series) < need or not gaps:
        have = f"{len(series)} sweep{'s' if len(series) != 1 else ''} with it"
        why = "a rise needs 2: nothing to compare" if any_rise else f"a forecast needs {need}"
        return TrendVerdict(
            node, figure, TrendStatus.TOO_FEW, len(series), None, None, None, None, None,
            threshold, None, f"{node}: {figure}: {have}, {why}: no forecast", Scale.COUNTER,
        )  # fmt: skip
    cadence = median(gaps)
    level, rise, span = series[-1].ratio, series[-1].ratio - series[0].ratio, xs[-1]
    per_sweep = rise / span * cadence
    last = series[-1].at

    def out(status: TrendStatus, days: float | None, reason: str) -> TrendVerdict:
        crosses = last + timedelta(days=days) if days is not None and days < CENTURY else None
        sweeps = None if days is None else days / cadence
        return TrendVerdict(
            node, figure, status, len(series), level, per_sweep, sweeps, days, crosses,
            threshold, None, reason, Scale.COUNTER,
        )  # fmt: skip

    head = f"{node}: {figure} {level:g}{unit_text}"
    over = f"{len(series)} sweeps"
    if any_rise:
        if rise > 0:
            why = (
                f"{head}, up {rise:g} over the last {over} (~{per_sweep:.2g} per sweep): "
                "the drive keeps finding them"
            )
            return out(TrendStatus.DECLINING, 0.0, why)
        if level >= threshold:
            why = f"{head}, none new over the last {over}: the facts rule's business, no forecast"
            return out(TrendStatus.BELOW, None, why)
        return out(TrendStatus.STEADY, None, f"{head}, none over the last {over}")
    if level >= threshold:
        line = f"at or above the {threshold:g}{unit_text} line: the facts rule's business"
        return out(TrendStatus.BELOW, None, f"{head}, {line}, no forecast")
    if rise <= 0:
        return out(TrendStatus.STEADY, None, f"{head}, not rising over {over}")
    days = (threshold - level) / (rise / span)
    when = f"~{last + timedelta(days=days):%Y-%m-%d}" if days < CENTURY else "a century on"
    words = (
        f"{head}, rising {per_sweep:.2g}{unit_text} per sweep; crosses {threshold:g}{unit_text} "
        f"in ~{days / cadence:.0f} sweeps ({when})"
    )
    slowest = (rise - 1) / span  # whole readings: the true rise may be 1 less than read
    left = (threshold - level) / slowest if slowest > 0 else math.inf
    if left > horizon.total_seconds() / DAY_S:
        later = (
            f"at the slowest rise whole readings allow ~{left / cadence:.0f} sweeps"
            if slowest > 0
            else f"a rise of {rise:g} in whole readings may be next to none"
        )
        why = f"{words}: not surely within the {_span(horizon)} horizon ({later})"
        return out(TrendStatus.STEADY, days, why)
    return out(TrendStatus.DECLINING, days, words)


def short_words(v: TrendVerdict) -> str:
    """A DECLINING figure in short, for a node list: 'seq read 0.78x peers, -0.03x/sweep,
    slow ~2026-12-08'; 'stall share +3.1 points over peers, +0.80 points/sweep, slow
    ~...'; 'media errors 7, +0.33/sweep, rising'."""
    when = "" if v.crosses_at is None else f" ~{v.crosses_at:%Y-%m-%d}"
    if v.level is None:
        return f"{v.figure} -"
    if v.scale is Scale.COUNTER:
        move = "" if v.per_sweep is None else f", {v.per_sweep:+.2g}/sweep"
        rising = v.days_to_cross == 0
        return f"{v.figure} {v.level:g}{move}, {'rising' if rising else f'{v.threshold:g}{when}'}"
    if v.scale is Scale.SHARE:
        move = "" if v.per_sweep is None else f", {v.per_sweep:+.2f} points/sweep"
        return f"{v.figure} {_points(v.level)} over peers{move}{', slow' + when if when else ''}"
    move = "" if v.per_sweep is None else f", {v.per_sweep:+.2g}x/sweep"
    return f"{v.figure} {v.level:.2f}x peers{move}{', slow' + when if when else ''}"


def _span(delta: timedelta) -> str:
    """14d, 6h, 90s: a horizon as an admin typed it (roughly)."""
    s = delta.total_seconds()
    for unit_s, name in ((DAY_S, "d"), (3600.0, "h"), (60.0, "m")):
        if s >= unit_s:
            return f"{s / unit_s:g}{name}"
    return f"{s:g}s"
