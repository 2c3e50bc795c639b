"""How good each verdict rule was, shadowed or not: `screener accuracy --by rule`.

Pure, over the same inputs as accuracy.py (each job's prolog verdicts, the last one of a
node counting, and each node's in-job read judgement). For every rule, over the nodes the
job ran on and judged:

- caught: the rule fired and the node was an in-job outlier;
- false_alarms: the rule fired and the node was fine in the job;
- misses: the rule did not fire and the node was an in-job outlier;
- drained: the rule fired on a node that did not run the job (screening drained it): its
  in-job speed is unknowable, counted, never scored.

A live rule that drains leaves little to score (its nodes leave the job); a shadowed rule
never drains, so its nodes run the job and its record fills up: that is when an admin can
promote it (docs/detection.md, "Shadow mode per rule").

The early warning (issue 46) is always in shadow (it never drains) and is scored on the
sweeps, not on jobs (verdict/trend_score.py): its row "trend" counts warnings as fired,
those the node's SLOW_READ followed within the horizon as caught, the rest (horizon passed)
as false alarms, SLOW_READ onsets with no warning before as misses, and adds the warnings
still within their horizon and the median lead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from screener.policy import RULE_NAMES
from screener.store.jobs import InJobRow, PrologRow
from screener.units import unit
from screener.verdict.shadow import fired
from screener.verdict.trend_score import TrendScore

TREND = "trend"


@dataclass(frozen=True)
class RuleRow:
    """One rule's record over the window."""

    rule: str
    mode: str  # "shadow" when [verdict] shadow names it now, else "live"
    fired: int  # node verdicts of ingested jobs where it fired
    caught: int
    false_alarms: int
    misses: int
    drained: int
    precision: float | None = field(
        metadata=unit("ratio", "precision")
    )  # caught / (caught + false_alarms)


@dataclass(frozen=True)
class TrendRow(RuleRow):
    """The early warning's record (mode always shadow, drained always 0): fired = warnings,
    caught = confirmed by a SLOW_READ within the horizon, false_alarms = the horizon passed."""

    pending: int  # warnings whose horizon has not passed yet
    lead_sweeps: float | None = field(metadata=unit("count", "lead sweeps"))  # median
    lead_days: float | None = field(metadata=unit("ratio", "lead days"))  # median


def trend_row(score: TrendScore) -> TrendRow:
    """The trend's row from its shadow record."""
    decided = score.confirmed + score.false
    return TrendRow(
        rule=TREND,
        mode="shadow",
        fired=score.warnings,
        caught=score.confirmed,
        false_alarms=score.false,
        misses=score.missed,
        drained=0,
        precision=score.confirmed / decided if decided else None,
        pending=score.pending,
        lead_sweeps=score.lead_sweeps,
        lead_days=score.lead_days,
    )


def by_rule(
    in_job: Iterable[InJobRow],
    prolog: Iterable[PrologRow],
    shadow: Sequence[str] = (),
    trend: TrendScore | None = None,
) -> list[RuleRow]:
    """One row per rule that fired at least once or is shadowed, in RULE_NAMES order; then
    the trend's (``trend``: its shadow record) when it had any node's sweeps to judge."""
    last: dict[tuple[str, str], set[str]] = {}
    for p in sorted(prolog, key=lambda p: (p.started_at, p.run_id)):
        last[(p.job_id, p.node)] = fired(p.signals)
    ran = {(r.job_id, r.node): r for r in in_job}
    jobs = {job for job, _ in ran}
    count = {rule: [0, 0, 0, 0, 0] for rule in RULE_NAMES}  # fired caught false miss drained
    for key, rules in last.items():
        if key[0] not in jobs:
            continue  # a job without in-job results: nothing to compare with
        row = ran.get(key)
        for rule in rules:
            count[rule][0] += 1
            if row is None:
                count[rule][4] += 1
            elif row.judged:
                count[rule][1 if row.outlier else 2] += 1
    for key, row in ran.items():
        if row.judged and row.outlier:
            for rule in set(RULE_NAMES) - last.get(key, set()):
                count[rule][3] += 1
    rows = [
        RuleRow(
            rule=rule,
            mode="shadow" if rule in shadow else "live",
            fired=n,
            caught=caught,
            false_alarms=false,
            misses=miss,
            drained=drained,
            precision=caught / (caught + false) if caught + false else None,
        )
        for rule, (n, caught, false, miss, drained) in count.items()
        if n or rule in shadow
    ]
    if trend is not None and trend.nodes:
        rows.append(trend_row(trend))
    return rows
