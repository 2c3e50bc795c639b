"""How good screening was: the prolog's per-node verdicts against what the job then saw.

Pure: takes the prolog verdicts of each job (every attempt) and the in-job read judgement
of each node the job ran on, and classifies every node:

- miss: screening passed it (OK) and the job found it an in-job outlier;
- stayed_ok: passed and not an outlier;
- caught: screening called it SLOW and it did not run the job (drained): its in-job speed
  cannot be known, so a catch can never be confirmed or refuted by the job;
- confirmed / false_alarm: called SLOW yet ran the job anyway (drain failed, guard) and
  was / was not an outlier;
- unscreened: the job ran on it without an OK/SLOW verdict (UNKNOWN, DEGRADED, no probe);
- not_judged: no in-job read judgement (fewer nodes than min_peers, or no read phase).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from screener.ingest.judge import TOO_SHORT
from screener.probe_data import Status
from screener.store.jobs import InJobRow, PrologRow
from screener.units import unit

_SLOW = (Status.SLOW_READ, Status.SLOW_WRITE)
CLASSES = ("miss", "stayed_ok", "caught", "confirmed", "false_alarm", "unscreened", "not_judged")
GROUPINGS = ("partition", "day", "job")


@dataclass(frozen=True)
class JobComparison:
    """One job's nodes, classified (node names per class)."""

    job_id: str
    partition: str | None
    observed_at: datetime
    screened: bool  # a prolog verdict exists for this job
    miss: tuple[str, ...] = ()
    stayed_ok: tuple[str, ...] = ()
    caught: tuple[str, ...] = ()
    confirmed: tuple[str, ...] = ()
    false_alarm: tuple[str, ...] = ()
    unscreened: tuple[str, ...] = ()
    not_judged: tuple[str, ...] = ()


@dataclass(frozen=True)
class AccuracyRow:
    """Counts over a group of jobs (a partition, a day, or one job)."""

    group: str
    jobs: int
    screened_jobs: int
    passed: int  # nodes screened OK and judged in the job (misses + stayed_ok)
    misses: int
    stayed_ok: int
    miss_rate: float | None = field(metadata=unit("ratio", "miss rate"))  # misses / passed
    caught: int  # drained before the job: in-job speed unknowable
    confirmed: int
    false_alarms: int
    unscreened: int
    not_judged: int
    missed_nodes: str = ""  # comma-separated, for the table


def compare_job(
    job_id: str, in_job: Sequence[InJobRow], prolog: Sequence[PrologRow]
) -> JobComparison:
    """Classify the nodes of one job; ``prolog`` in run order (the last verdict counts)."""
    verdict: dict[str, Status] = {}
    for p in prolog:
        verdict[p.node] = p.status
    ran = {r.node: r for r in in_job}
    classes: dict[str, list[str]] = {
        k: []
        for k in JobComparison.__dataclass_fields__
        if k not in ("job_id", "partition", "observed_at", "screened")
    }
    for node, r in sorted(ran.items()):
        status = verdict.get(node)
        if not r.judged:
            classes["not_judged"].append(node)
        elif status is Status.OK:
            classes["miss" if r.outlier else "stayed_ok"].append(node)
        elif status in _SLOW:
            classes["confirmed" if r.outlier else "false_alarm"].append(node)
        else:
            classes["unscreened"].append(node)
    classes["caught"] = sorted(n for n, s in verdict.items() if s in _SLOW and n not in ran)
    first = in_job[0]
    return JobComparison(
        job_id,
        first.partition,
        first.observed_at,
        bool(prolog),
        **{k: tuple(v) for k, v in classes.items()},
    )


def compare_all(in_job: Iterable[InJobRow], prolog: Iterable[PrologRow]) -> list[JobComparison]:
    """One JobComparison per job that has in-job results, oldest first."""
    jobs: dict[str, list[InJobRow]] = {}
    for r in in_job:
        jobs.setdefault(r.job_id, []).append(r)
    verdicts: dict[str, list[PrologRow]] = {}
    for p in sorted(prolog, key=lambda p: (p.started_at, p.run_id)):
        verdicts.setdefault(p.job_id, []).append(p)
    out = [compare_job(j, rows, verdicts.get(j, [])) for j, rows in jobs.items()]
    return sorted(out, key=lambda c: (c.observed_at, c.job_id))


def _key(c: JobComparison, by: str) -> str:
    if by == "partition":
        return c.partition or "-"
    if by == "day":
        return c.observed_at.strftime("%Y-%m-%d")
    return c.job_id


def summarize(comparisons: Sequence[JobComparison], by: str = "partition") -> list[AccuracyRow]:
    """Counts per group (``by``: partition, day or job), plus an "all" row for >1 group."""
    if by not in GROUPINGS:
        raise ValueError(f"group by one of {', '.join(GROUPINGS)}, not {by!r}")
    groups: dict[str, list[JobComparison]] = {}
    for c in comparisons:
        groups.setdefault(_key(c, by), []).append(c)
    rows = [_row(name, cs) for name, cs in sorted(groups.items())]
    if len(rows) > 1 and by != "job":
        rows.append(_row("all", comparisons))
    return rows


def _row(group: str, cs: Sequence[JobComparison]) -> AccuracyRow:
    def n(attr: str) -> int:
        return sum(len(getattr(c, attr)) for c in cs)

    misses, ok = n("miss"), n("stayed_ok")
    return AccuracyRow(
        group=group,
        jobs=len(cs),
        screened_jobs=sum(c.screened for c in cs),
        passed=misses + ok,
        misses=misses,
        stayed_ok=ok,
        miss_rate=misses / (misses + ok) if misses + ok else None,
        caught=n("caught"),
        confirmed=n("confirmed"),
        false_alarms=n("false_alarm"),
        unscreened=n("unscreened"),
        not_judged=n("not_judged"),
        missed_nodes=",".join(sorted({m for c in cs for m in c.miss})),
    )


def unknowable(comparisons: Sequence[JobComparison]) -> list[str]:
    """Plain statements of what these figures cannot tell."""
    out = [
        "a node screening drained never ran the job: whether it would have been slow in the "
        "job cannot be known, so catches are counted but never scored",
        "an in-job outlier is judged against the job's other nodes: a slowdown shared by "
        "all of them (file system, network) is no node's outlier, and a slow rank can also "
        "come from the job itself (imbalance), not only from the node's storage",
    ]
    rows = _row("all", comparisons)
    if unscreened := sum(1 for c in comparisons if not c.screened):
        out.append(f"{unscreened} job(s) have in-job results but no prolog verdicts: not scored")
    if rows.not_judged:
        out.append(
            f"{rows.not_judged} node(s) had no in-job read judgement (fewer nodes than "
            "verdict.min_peers, read phases too short to judge, no read phase, or no "
            "per-rank data)"
        )
    if rows.unscreened:
        out.append(
            f"{rows.unscreened} node(s) ran the job without an OK/SLOW prolog verdict "
            "(UNKNOWN, DEGRADED, not probed, or the job was not screened)"
        )
    return out


def too_short(notes: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """(job, note) for every phase an ingest found too short to judge, by job id."""
    return [(job, n) for job, ns in sorted(notes.items()) for n in ns if TOO_SHORT in n]
