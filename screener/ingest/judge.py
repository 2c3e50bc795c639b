"""Per-node figures of one job and the in-job outlier judgement (pure).

A node's figure for a phase and iteration sums its ranks' bytes over its slowest rank's
time (its ranks run together, the node is done when the last one is). Each node is then
compared with the job's other nodes with the prolog's peers rule (screener.verdict.judge's
robust log-space z, plus the min_peer_drop gap), so a node is an in-job outlier on the
same terms a probe would call it slow.

Only evidence that survives noise counts (issue 19: one 40 ms read phase made a healthy
node 0.43x): a phase too short to judge ([ingest] min_phase_s / min_phase_mib) gets no
z-score, and an outlier must persist (most judged iterations) or be decisive (<=
decisive_ratio of the job's median node in one iteration).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from screener.errors import ConfigError, ProbeError
from screener.ingest.layout import RankLayout
from screener.ingest.results import ParsedFile, Phase, RankResult, SourceKind
from screener.policy import IngestPolicy, VerdictPolicy
from screener.verdict.rules import PeerStats, peer_stats

_SUMMARIES = (SourceKind.IOR_TEXT, SourceKind.IOR_JSON)
_MIB = 1 << 20
_DEFAULT_RULES = IngestPolicy()
TOO_SHORT = "too short to judge"  # starts the notes `screener job`/`accuracy` repeat


@dataclass(frozen=True)
class Figure:
    """One row of a job's results: a node's (or, with node None, the whole job's) phase."""

    node: str | None  # None: the whole job
    phase: Phase
    iteration: int
    ranks: int  # ranks behind the figure (0 when the tool gave only a job-wide figure)
    bytes: int
    seconds: float
    throughput_bytes_s: float
    # node: throughput / the job's median node; whole job: median node time / slowest
    # node time (1.0 = nobody dragged the job down). None when it cannot be computed.
    ratio: float | None
    z: float | None  # robust log-space z vs the job's nodes; None below min_peers nodes
    outlier: bool
    source: SourceKind


@dataclass(frozen=True)
class SlowNode:
    """A node whose in-job read phase was an outlier: gets an in-job episode."""

    node: str
    reason: str


@dataclass(frozen=True)
class JobFigures:
    """Everything ingest learned from one job's files."""

    figures: tuple[Figure, ...]
    slow: tuple[SlowNode, ...]
    notes: tuple[str, ...]  # what could not be known, and why


def check_files(files: Sequence[ParsedFile]) -> None:
    """One run per ingest: at most one IOR summary and one CSV, no IOR mixed with fio."""
    kinds = [f.kind for f in files]
    if not files:
        raise ConfigError("no files to ingest")
    if SourceKind.FIO_JSON in kinds and len(set(kinds)) > 1:
        raise ConfigError("ingest IOR and fio outputs of a job separately, not together")
    if sum(k in _SUMMARIES for k in kinds) > 1:
        raise ConfigError("give one IOR summary (text or JSON) per ingest: each is one run")
    if kinds.count(SourceKind.IOR_CSV) > 1:
        raise ConfigError("give one IOR per-rank CSV per ingest: each is one run")
    summary = next((f for f in files if f.kind in _SUMMARIES), None)
    csv = next((f for f in files if f.kind is SourceKind.IOR_CSV), None)
    if summary and csv:
        phases = {t.phase for t in summary.totals}, {r.phase for r in csv.ranks}
        if phases[0] != phases[1]:
            raise ProbeError(csv.name, f"phases differ from {summary.name}: not the same IOR run")
        for what in ("tasks", "repetitions"):
            a, b = getattr(summary, what), getattr(csv, what)
            if a is not None and b is not None and a != b:
                raise ProbeError(
                    csv.name, f"{what} {b} but {summary.name} says {a}: not the same IOR run"
                )


def _is_outlier(stats: PeerStats | None, value: float, policy: VerdictPolicy) -> bool:
    """The prolog's peers rule: robust z beyond the threshold AND a real gap to the median."""
    if stats is None:
        return False
    return stats.z(value) < -policy.z_threshold and value < policy.min_peer_drop * stats.median


def _node_figures(
    ranks: Sequence[RankResult],
    layout: RankLayout,
    source: SourceKind,
    policy: VerdictPolicy,
    rules: IngestPolicy,
) -> tuple[list[Figure], dict[Phase, list[tuple[int, float, float]]]]:
    """Per node, phase and iteration, judged against the job's other nodes; and per phase,
    the (iteration, longest node s, median node bytes) of iterations too short to judge."""
    groups: dict[tuple[Phase, int], dict[str, list[RankResult]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in ranks:
        groups[(r.phase, r.iteration)][layout.node_of(r.rank)].append(r)
    out: list[Figure] = []
    short: dict[Phase, list[tuple[int, float, float]]] = defaultdict(list)
    for (phase, iteration), by_node in sorted(groups.items()):
        rows = []
        for node, rs in sorted(by_node.items()):
            moved, slowest = sum(r.bytes for r in rs), max(r.seconds for r in rs)
            bw = moved / slowest if slowest > 0 else sum(r.throughput_bytes_s for r in rs)
            rows.append((node, len(rs), moved, slowest, bw))
        longest = max(slowest for _, _, _, slowest, _ in rows)
        typical = statistics.median(moved for _, _, moved, _, _ in rows)
        stats = peer_stats([bw for *_, bw in rows], policy)
        if longest < rules.min_phase_s or typical < rules.min_phase_mib * _MIB:
            if stats is not None:  # enough nodes to judge, but not enough work
                short[phase].append((iteration, longest, typical))
            stats = None
        median = statistics.median(bw for *_, bw in rows)
        for node, n, moved, slowest, bw in rows:
            out.append(
                Figure(
                    node=node,
                    phase=phase,
                    iteration=iteration,
                    ranks=n,
                    bytes=moved,
                    seconds=slowest,
                    throughput_bytes_s=bw,
                    ratio=bw / median if median > 0 and len(rows) > 1 else None,
                    z=stats.z(bw) if stats else None,
                    outlier=_is_outlier(stats, bw, policy),
                    source=source,
                )
            )
    return out, short


def _short_notes(
    short: dict[Phase, list[tuple[int, float, float]]], rules: IngestPolicy
) -> list[str]:
    """One note per phase naming the iterations too short to judge, and why."""
    out = []
    for phase, its in sorted(short.items(), key=lambda kv: kv[0].value):
        which = ", ".join(str(i) for i, _, _ in its)
        longest = max(t for _, t, _ in its)
        typical = min(b for _, _, b in its) / _MIB
        out.append(
            f"{phase.value} {TOO_SHORT} in iteration(s) {which}: longest node "
            f"{longest:.3f} s, median node {typical:,.1f} MiB (needs [ingest] "
            f"min_phase_s={rules.min_phase_s:g} and min_phase_mib={rules.min_phase_mib:g})"
        )
    return out


def _persistent(figures: Sequence[Figure], rules: IngestPolicy) -> tuple[list[Figure], list[str]]:
    """Keep a node's outlier flags in a phase only if they persist (more than half of its
    judged iterations) or one is decisive (ratio <= decisive_ratio); notes for the rest."""
    by_key: dict[tuple[str, Phase], list[Figure]] = defaultdict(list)
    for f in figures:
        if f.node is not None and f.z is not None:
            by_key[(f.node, f.phase)].append(f)
    dropped: set[tuple[str, Phase]] = set()
    notes = []
    for (node, phase), judged in sorted(by_key.items(), key=lambda kv: (kv[0][0], kv[0][1].value)):
        bad = [f for f in judged if f.outlier]
        decisive = any(f.ratio is not None and f.ratio <= rules.decisive_ratio for f in bad)
        if not bad or 2 * len(bad) > len(judged) or decisive:
            continue
        dropped.add((node, phase))
        worst = min(f.ratio for f in bad if f.ratio is not None)
        notes.append(
            f"{node} {phase.value}: an outlier in {len(bad)} of {len(judged)} judged "
            f"iterations (worst {worst:.2f}x job median), neither most of them nor "
            f"<= {rules.decisive_ratio:g}x in one: not counted"
        )
    kept = [
        dataclasses.replace(f, outlier=False)
        if f.node is not None and (f.node, f.phase) in dropped
        else f
        for f in figures
    ]
    return kept, notes


def _job_figures(nodes: Sequence[Figure], summary: ParsedFile | None) -> list[Figure]:
    """Whole-job rows: the tool's own totals if it gave them, else summed from the nodes."""
    totals = summary.totals if summary else ()
    keys = sorted(
        {(f.phase, f.iteration) for f in nodes} | {(t.phase, t.iteration) for t in totals}
    )
    given = {(t.phase, t.iteration): t for t in totals}
    out = []
    for phase, iteration in keys:
        mine = [f for f in nodes if (f.phase, f.iteration) == (phase, iteration)]
        times = [f.seconds for f in mine]
        drag = statistics.median(times) / max(times) if times and max(times) > 0 else None
        if (t := given.get((phase, iteration))) is not None and summary is not None:
            moved, seconds, bw, src = t.bytes, t.seconds, t.throughput_bytes_s, summary.kind
        else:
            moved, seconds = sum(f.bytes for f in mine), max(times)
            bw = moved / seconds if seconds > 0 else 0.0
            src = mine[0].source
        ranks = sum(f.ranks for f in mine) or (summary.tasks if summary else None) or 0
        out.append(
            Figure(None, phase, iteration, ranks, moved, seconds, bw, drag, None, False, src)
        )
    return out


def _mb(bw: float) -> str:
    return f"{bw / 1e6:,.0f} MB/s" if bw >= 1e6 else f"{bw / 1e6:.2f} MB/s"


def _x(ratio: float) -> str:
    """A ratio to the job's median: two decimals, or one significant digit below 0.01."""
    return f"{ratio:.2f}x" if ratio >= 0.01 else f"{ratio:.1g}x"


def _slow_nodes(figures: Sequence[Figure]) -> list[SlowNode]:
    """Nodes with an outlier read phase, with the worst iteration in the reason."""
    reads = [f for f in figures if f.node is not None and f.phase is Phase.READ]
    out = []
    for node in sorted({f.node for f in reads if f.outlier and f.node is not None}):
        bad = [f for f in reads if f.node == node and f.outlier]
        iterations = sum(1 for f in reads if f.node == node and f.z is not None)
        worst = min(bad, key=lambda f: f.throughput_bytes_s)
        assert worst.ratio is not None and worst.z is not None
        median = worst.throughput_bytes_s / worst.ratio
        reason = (
            f"in-job read {_mb(worst.throughput_bytes_s)} = {_x(worst.ratio)} job median "
            f"{_mb(median)} (z={worst.z:.1f}) in {len(bad)} of {iterations} judged iterations"
        )
        out.append(SlowNode(node, reason))
    return out


def judge_job(
    files: Sequence[ParsedFile],
    layout: RankLayout | None,
    policy: VerdictPolicy,
    rules: IngestPolicy = _DEFAULT_RULES,
) -> JobFigures:
    """Figures per node (and for the whole job), outliers, and in-job slow nodes; ``rules``
    says which phases are long enough to judge and which outliers persist."""
    check_files(files)
    ranks = [r for f in files for r in f.ranks]
    rank_source = next((f.kind for f in files if f.ranks), None)
    summary = next((f for f in files if f.kind in _SUMMARIES), None)
    notes: list[str] = []
    nodes: list[Figure] = []
    if ranks and layout is None:
        raise ConfigError("per-rank results need a task layout: give --nodes and --ranks-per-node")
    if ranks and layout is not None and rank_source is not None:
        nodes, short = _node_figures(ranks, layout, rank_source, policy, rules)
        nodes, noise = _persistent(nodes, rules)
        notes += _short_notes(short, rules) + noise
        count = len({f.node for f in nodes})
        if count < policy.min_peers:
            notes.append(
                f"{count} nodes, fewer than verdict.min_peers={policy.min_peers}: "
                "no outlier judgement"
            )
        used = len({r.rank for r in ranks})
        if used < len(layout.nodes):
            notes.append(f"{used} ranks in the files, {len(layout.nodes)} in the layout")
        if (
            summary
            and summary.tasks_per_node
            and layout.nodes.count(layout.nodes[0]) != summary.tasks_per_node
        ):
            notes.append(
                f"{summary.name} reports {summary.tasks_per_node} tasks per node; "
                f"the layout used is {layout.how}"
            )
    else:
        notes.append(
            "no per-rank data: IOR's text and JSON summaries carry only job-wide figures; "
            "ingest the per-rank CSV (-O saveRankPerformanceDetailsCSV=) to attribute nodes"
        )
    job = _job_figures(nodes, summary)
    return JobFigures(tuple(job + nodes), tuple(_slow_nodes(nodes)), tuple(notes))
