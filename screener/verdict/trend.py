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
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import NormalDist, median

from screener.units import label, unit

DAY_S = 86_400.0
CENTURY = 36_500.0  # days: a forecast further out has no date


class TrendStatus(enum.StrEnum):
    """What the fit says of a node's figure."""

    DECLINING = "DECLINING"  # falling beyond the noise; crosses the line within the horizon
    STEADY = "STEADY"  # no fall beyond the noise, or one too slow to matter in the horizon
    BELOW = "BELOW"  # already at or below the slow line: the slow rules' business
    TOO_FEW = "TOO_FEW"  # too few sweeps of this recipe for a forecast


@dataclass(frozen=True)
class Point:
    """One sweep's figure of one node: its value over the round's peer median."""

    at: datetime
    ratio: float
    recipe: str | None = None
    run_id: int | None = None


@dataclass(frozen=True)
class Fit:
    """Theil-Sen over (days, log ratio): slope per day with its band, the fitted level at
    the newest point, the series' cadence (median interval between points, in days)."""

    n: int
    slope: float
    low: float
    high: float
    level: float
    cadence_days: float
    last_at: datetime


@dataclass(frozen=True)
class TrendVerdict:
    """The decision for one node and figure, with the words an admin reads."""

    node: str
    figure: str  # "seq read", "rand read"
    status: TrendStatus
    sweeps: int = field(metadata=unit("count", "sweeps"))  # points of the current recipe
    level: float | None = field(metadata=unit("ratio", "now x peers"))
    per_sweep: float | None = field(metadata=unit("ratio", "x/sweep"))  # < 0: falling
    sweeps_to_cross: float | None = field(metadata=unit("count", "sweeps left"))
    days_to_cross: float | None = field(metadata=unit("ratio", "days left"))
    crosses_at: datetime | None = field(metadata=label("crosses"))
    threshold: float = field(metadata=unit("ratio", "line"))
    recipe: str | None = field(metadata=label("recipe"))
    reason: str = field(metadata=label("reason", wrap=True))


def current_series(points: Sequence[Point]) -> list[Point]:
    """The newest recipe's points, oldest first: a new recipe starts a new series (its
    figures are another test), and going back to an older recipe takes up its figures as
    history does (like with like). Points without a positive finite ratio are dropped."""
    good = sorted((p for p in points if math.isfinite(p.ratio) and p.ratio > 0), key=lambda p: p.at)
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


def fit(series: Sequence[Point], confidence: float = 0.9) -> Fit | None:
    """Theil-Sen slope of log(ratio) per day over ``series`` (oldest first) and its
    two-sided ``confidence`` band; None when fewer than 3 points at distinct times."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    t0 = series[0].at if series else None
    xs = [(p.at - t0).total_seconds() / DAY_S for p in series] if t0 else []
    ys = [math.log(p.ratio) for p in series]
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
    level = math.exp(intercept + b * xs[-1])
    return Fit(len(series), b, low, high, level, median(gaps), series[-1].at)


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
) -> TrendVerdict:
    """The decision for one node's ``figure``: its newest recipe's last ``window`` points
    (at least ``min_sweeps``), DECLINING when even the slowest fall the slope's band allows
    crosses ``threshold`` (x peers) within ``horizon`` of the newest point."""
    series = current_series(points)[-window:]
    recipe = series[-1].recipe if series else None
    f = fit(series, confidence) if len(series) >= max(min_sweeps, 3) else None
    if f is None:
        have = f"{len(series)} sweep{'s' if len(series) != 1 else ''}"
        return TrendVerdict(
            node,
            figure,
            TrendStatus.TOO_FEW,
            len(series),
            None,
            None,
            None,
            None,
            None,
            threshold,
            recipe,
            f"{node}: {figure}: {have} of this recipe, a forecast needs {min_sweeps}: no forecast",
        )
    per_sweep = f.level * math.expm1(f.slope * f.cadence_days)

    def out(status: TrendStatus, days: float | None, reason: str) -> TrendVerdict:
        crosses = f.last_at + timedelta(days=days) if days is not None and days < CENTURY else None
        sweeps = None if days is None else days / f.cadence_days
        return TrendVerdict(
            node, figure, status, f.n, f.level, per_sweep, sweeps, days, crosses, threshold,
            recipe, reason,
        )  # fmt: skip

    head = f"{node}: {figure} {f.level:.2f}x peers"
    if f.level <= threshold:
        line = f"at or below the {threshold:g}x line: the slow rules' business, no forecast"
        return out(TrendStatus.BELOW, None, f"{head}, {line}")
    if f.high >= 0:
        lo, hi = (f.level * math.expm1(b * f.cadence_days) for b in (f.low, f.high))
        band = f"{lo:+.3f}..{hi:+.3f}x per sweep"
        return out(TrendStatus.STEADY, None, f"{head}, no fall beyond the noise ({band})")
    days = math.log(threshold / f.level) / f.slope
    slowest = math.log(threshold / f.level) / f.high  # the slowest fall the band allows
    when = f"~{f.last_at + timedelta(days=days):%Y-%m-%d}" if days < CENTURY else "a century on"
    words = (
        f"{head}, falling {-per_sweep:.2f}x per sweep; crosses {threshold:g}x in "
        f"~{days / f.cadence_days:.0f} sweeps ({when})"
    )
    if slowest > horizon.total_seconds() / DAY_S:
        later = f"at the slowest fall the noise allows ~{slowest / f.cadence_days:.0f} sweeps"
        why = f"{words}: not surely within the {_span(horizon)} horizon ({later})"
        return out(TrendStatus.STEADY, days, why)
    return out(TrendStatus.DECLINING, days, words)


def _span(delta: timedelta) -> str:
    """14d, 6h, 90s: a horizon as an admin typed it (roughly)."""
    s = delta.total_seconds()
    for unit_s, name in ((DAY_S, "d"), (3600.0, "h"), (60.0, "m")):
        if s >= unit_s:
            return f"{s / unit_s:g}{name}"
    return f"{s:g}s"
