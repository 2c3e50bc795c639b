"""Shadow mode per rule: a rule named in ``[verdict] shadow`` is evaluated and stored with
the verdict, but never makes a node SLOW (so it never drains one).

A post-filter over one node's verdict, applied by ``judge.evaluate`` before anything reads
the verdicts (shared cause, suspects, confirmation): a shadowed rule's signal is stored as
``shadow:NAME`` (no other code treats it as a rule that fired), and a node that only
shadowed rules called slow is OK with the reason "would have drained (shadow: NAME): ...",
never a baseline (its figures do not teach the node's history). A slow node whose live
rules left are soft (a close call, a stall mode) is what those alone make it: DEGRADED.
A failed probe whose only slow rule is shadowed (``read_timeout``) stays UNKNOWN. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from screener.policy import RULE_NAMES
from screener.probe_data import Status, Verdict
from screener.verdict.rules import SOFT_TAGS

PREFIX = "shadow:"
WOULD = "would have drained"
_SLOW = (Status.SLOW_READ, Status.SLOW_WRITE)


def shadowed(v: Verdict, shadow: Iterable[str]) -> Verdict:
    """``v`` with the rules in ``shadow`` kept as evidence only (see the module)."""
    names = set(shadow)
    hit = [t for t in v.signals if t in names]
    if not hit:
        return v
    signals = tuple(PREFIX + t if t in names else t for t in v.signals)
    live = [t for t in signals if t in RULE_NAMES]
    if v.status == Status.DEGRADED and not live and "facts" not in v.signals:
        # DEGRADED by a soft rule alone (a stall mode): what it would have flagged, kept.
        return replace(
            v,
            status=Status.OK,
            signals=signals,
            reason=f"would have flagged (shadow: {', '.join(hit)}): {v.reason}",
            baseline=False,
        )
    if v.status in _SLOW and live and set(live) <= SOFT_TAGS:
        # only soft rules left live (a close call beside a shadowed tail rule): DEGRADED
        return replace(
            v,
            status=Status.DEGRADED,
            signals=signals,
            reason=f"{v.reason} ({', '.join(hit)} in shadow: DEGRADED by {', '.join(live)})",
            baseline=False,
            confirmed=False,
        )
    if v.status not in _SLOW or live:
        return replace(v, signals=signals)  # decided by live rules (or not slow at all)
    status = Status.UNKNOWN if v.read_mb_s is None else Status.OK
    return replace(
        v,
        status=status,
        signals=signals,
        reason=f"{WOULD} (shadow: {', '.join(hit)}): {v.reason}",
        baseline=False,
        confirmed=False,
    )


def shadow_rules(signals: Iterable[str]) -> list[str]:
    """The shadowed rules among a stored verdict's signals."""
    return [t.removeprefix(PREFIX) for t in signals if t.startswith(PREFIX)]


def fired(signals: Iterable[str]) -> set[str]:
    """Every rule that fired for a stored verdict, live or shadowed."""
    return {t.removeprefix(PREFIX) for t in signals} & set(RULE_NAMES)
